// The console's admin pages in Debian's Chromium against a real `airlock
// serve` (tests/integration/test_console.py, test_console_admin, hands over
// the URL, one-time login links and keys): Settings → Code execution,
// Usage, Audit, Skills (the test bench) and Keys. Each test signs in with its
// own link in a fresh browser context, checks what the page shows against
// what the API answers, writes the page's screenshots at 1280×800 and
// 390×844 and checks axe-core finds no serious or critical violation.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { apiCall, BASE, check, key, launch, signInAs } from './console_util.mjs';

const url = BASE();

let browser;
before(async () => { browser = await launch(); });
after(async () => { if (browser) await browser.close(); });

// WHO signed in with a link of their own in a fresh context (an empty profile), on HASH
async function page(who, hash) {
  const s = await signInAs(browser, who);
  await s.page.goto(url + '/' + hash);
  await s.page.locator('main h1').first().waitFor();
  return { p: s.page, context: s.context };
}

const api = (method, path, body, k) => (k
  ? fetch(url + path, { method, headers: { Authorization: `Bearer ${k}` } }).then(async (r) => ({ status: r.status,
    doc: await r.json().catch(() => null) }))
  : apiCall('admin', method, path, body));

// what the page's own fetch gets, with its session cookie and its CSRF token
async function fromPage(p, method, path, body) {
  return p.evaluate(async ([method, path, body]) => {
    const s = await (await fetch('/v1/session')).json();
    const r = await fetch(path, { method, headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf_token },
      body: body ? JSON.stringify(body) : undefined });
    return { status: r.status, doc: await r.json().catch(() => null) };
  }, [method, path, body]);
}

// the page's screenshots at both sizes and axe-core at each (console_util's check); then the context goes
async function finish(name, { p, context }, ready) {
  // from the top: a full-page screenshot of a scrolled page draws the sticky header mid-page
  await p.evaluate(() => window.scrollTo(0, 0));
  await check(p, name, ready);
  await context.close();
}

test('settings: the badges in words; a change is saved and its audit event shown; a bad DLP pattern is refused in the API\'s words; a secret is write-only', async (t) => {
  const s = await page('admin', '#/settings');
  const { p } = s;
  const before = (await api('GET', '/v1/settings')).doc;
  // each driver control's badge, in words
  const controls = p.getByRole('table', { name: 'Controls of the driver' });
  await controls.waitFor();
  const words = { 'boundary': 'Boundary', 'boundary-conditional': 'Boundary — conditional',
    'applied': 'Applied — not a full boundary', 'unconfirmed': 'Unconfirmed', 'not-enforced': 'Not enforced' };
  for (const [name, b] of Object.entries(before.badges)) {
    const row = controls.getByRole('row').filter({ has: p.getByRole('cell', { name, exact: true }) });
    await assert.doesNotReject(row.getByText(words[b.level], { exact: true }).waitFor({ timeout: 5000 }), `badge of ${name}`);
  }
  // the network modes' badges and Internet's warning
  assert.ok(await p.getByText('Internet access is permissive').isHidden());
  const internet = p.getByRole('radio', { name: /^Internet access/ });
  assert.ok((await p.locator('label[for=adm-net-internet]').textContent()).includes(words[before.network_modes.internet.level]));
  await internet.check();
  await p.getByText('Internet access is permissive', { exact: false }).waitFor();
  await p.getByRole('radio', { name: /^Offline/ }).check();
  assert.ok(await p.getByText('Internet access is permissive').isHidden());

  // a change: the wall clock, saved and shown as an audit event naming it
  const want = before.timeout_s === 45 ? 46 : 45;
  await p.getByLabel('Wall clock, default (seconds)').fill(String(want));
  await p.getByRole('button', { name: 'Save settings' }).click();
  const changes = p.getByRole('table', { name: 'Recent settings changes' });
  await changes.getByRole('row').filter({ hasText: 'timeout_s' }).first().waitFor();
  assert.equal((await api('GET', '/v1/settings')).doc.timeout_s, want);
  const ev = (await api('GET', '/v1/audit?kind=settings.changed&limit=1')).doc.events[0];
  assert.deepEqual(ev.data.keys, ['timeout_s']);

  // a DLP pattern that does not compile: the API's 400 in words, nothing saved
  await p.getByRole('button', { name: 'Add pattern' }).click();
  const n = before.dlp_patterns.length + 1;
  await p.getByLabel(`Pattern ${n} name`).fill('broken');
  await p.getByLabel(`Pattern ${n} regular expression`).fill('EMP-([0-9]{6}');
  await p.getByRole('button', { name: 'Save settings' }).click();
  const refused = await api('PATCH', '/v1/settings', { dlp_patterns: [{ name: 'broken', pattern: 'EMP-([0-9]{6}' }] });
  assert.equal(refused.status, 400);
  const shown = p.locator('#adm-save-error');
  await shown.filter({ hasText: refused.doc.error.message }).waitFor();
  assert.match(await shown.textContent(), /^Not saved: /);
  assert.deepEqual((await api('GET', '/v1/settings')).doc.dlp_patterns, before.dlp_patterns);
  // an empty one is caught before it is sent
  await p.getByLabel(`Pattern ${n} regular expression`).fill('');
  await p.getByRole('button', { name: 'Save settings' }).click();
  await shown.filter({ hasText: 'both a name and a pattern are needed' }).waitFor();
  await p.getByRole('button', { name: `Remove pattern ${n}` }).click();
  assert.equal(await shown.textContent(), '', 'the error outlived the pattern removed');

  // a secret: saved, listed by name, its value nowhere in the page nor the API
  const value = `s3cr3t-${Date.now()}-value`;
  await p.getByLabel('Secret name').fill('warehouse_token');
  await p.getByLabel('Value').fill(value);
  await p.getByRole('button', { name: 'Save secret' }).click();
  await p.getByRole('button', { name: 'Delete warehouse_token' }).waitFor();
  const html = await p.content();
  assert.ok(!html.includes(value), 'the secret\'s value is in the page');
  assert.equal(await p.getByLabel('Value').inputValue(), '');
  const got = await api('GET', '/v1/settings');
  assert.ok(got.doc.secrets.includes('warehouse_token'));
  assert.ok(!JSON.stringify(got.doc).includes(value), 'the secret\'s value is in GET /v1/settings');
  const audit = await api('GET', '/v1/audit?kind=settings.changed&limit=5');
  assert.ok(!JSON.stringify(audit.doc).includes(value), 'the secret\'s value is in the audit trail');
  await changes.getByRole('row').filter({ hasText: 'secrets' }).first().waitFor();
  // a second secret, then deleted: gone from the list and from the API's names
  await p.getByLabel('Secret name').fill('scratch_token');
  await p.getByLabel('Value').fill('to-be-deleted');
  await p.getByRole('button', { name: 'Save secret' }).click();
  await p.getByRole('button', { name: 'Delete scratch_token' }).click();
  await p.getByText('Secret scratch_token deleted.', { exact: false }).waitFor();
  assert.equal(await p.getByRole('button', { name: 'Delete scratch_token' }).count(), 0);
  assert.deepEqual((await api('GET', '/v1/settings')).doc.secrets, ['warehouse_token']);
  await finish('admin-settings', s);
});

test('a member sees no Settings in the nav and no Promote; PATCH /v1/settings and a promotion from their page are refused 403', async (t) => {
  const s = await page('member', '#/keys');
  const { p } = s;
  const nav = p.getByRole('navigation', { name: 'Console' });
  await nav.getByRole('link', { name: 'Keys' }).waitFor();
  assert.equal(await nav.getByRole('link', { name: 'Settings' }).count(), 0);
  const r = await fromPage(p, 'PATCH', '/v1/settings', { timeout_s: 7 });
  // the browser logs the refusal this test asked for: not a fault of the page
  p.errors = p.errors.filter((e) => !/status of 403/.test(e));
  assert.equal(r.status, 403, JSON.stringify(r.doc));
  assert.equal(r.doc.error.code, 'forbidden');
  assert.notEqual((await api('GET', '/v1/settings')).doc.timeout_s, 7);
  // Skills: the bench, but no Promote for a member, and the API refuses it from their page
  await p.goto(url + '/#/skills');
  await p.getByRole('button', { name: 'Test greeter' }).waitFor();
  assert.equal(await p.getByRole('button', { name: 'Promote greeter' }).count(), 0);
  const promote = await fromPage(p, 'POST', '/v1/skills/greeter/promote', {});
  assert.equal(promote.status, 403, JSON.stringify(promote.doc));
  p.errors = p.errors.filter((e) => !/status of 403/.test(e));
  assert.equal((await api('GET', '/v1/skills/greeter')).doc.state, 'uploaded');
  // the page itself, typed in: says who it is for, offers no form
  await p.goto(url + '/#/settings');
  await p.getByText('This page is for admins', { exact: false }).waitFor();
  assert.equal(await p.getByRole('button', { name: 'Save settings' }).count(), 0);
  await finish('admin-settings-member', s, p.getByText('This page is for admins'));
});

test('keys: created with a name and shown once, it works as a Bearer key; listed by name; revoked, then refused', async (t) => {
  const s = await page('admin', '#/keys');
  const { p } = s;
  const name = `ci-agent-${Date.now() % 100000}`;
  await p.getByLabel('Key name').fill(name);
  await p.getByRole('button', { name: 'Create key' }).click();
  await p.getByText('shown once', { exact: false }).first().waitFor();
  await p.getByRole('button', { name: 'Copy key' }).waitFor();
  const secret = await p.getByLabel('The new key (shown once)').inputValue();
  assert.match(secret, /^al_/);
  // Copy key puts exactly the secret on the clipboard
  await s.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  await p.getByRole('button', { name: 'Copy key' }).click();
  await p.getByText('Key copied.', { exact: true }).waitFor();
  assert.equal(await p.evaluate(() => navigator.clipboard.readText()), secret);
  const runs = await api('GET', '/v1/runs?limit=1', null, secret);
  assert.equal(runs.status, 200, JSON.stringify(runs.doc));
  // listed by name, the secret nowhere in the list nor GET /v1/keys
  const row = p.getByRole('table', { name: 'API keys by name' }).getByRole('row').filter({ hasText: name });
  await row.waitFor();
  const keys = (await api('GET', '/v1/keys')).doc.keys;
  assert.ok(keys.some((k) => k.name === name));
  assert.ok(!JSON.stringify(keys).includes(secret));
  await p.evaluate(() => window.scrollTo(0, 0));
  await check(p, 'admin-keys-created');
  // gone once the page is left and come back to
  await p.goto(url + '/#/activity');
  await p.goto(url + '/#/keys');
  await row.waitFor();
  assert.ok(!(await p.content()).includes(secret), 'the secret is shown again');
  await row.getByRole('button', { name: `Revoke ${name}` }).click();
  await row.getByText('Revoked', { exact: false }).waitFor();
  const refused = await api('GET', '/v1/runs?limit=1', null, secret);
  assert.equal(refused.status, 401);
  await finish('admin-keys', s);
});

test('usage: the balance, the ledger and the runs per day by state, language and interface with their text alternatives', async (t) => {
  const s = await page('admin', '#/usage');
  const { p } = s;
  const u = (await api('GET', '/v1/usage')).doc;
  await p.locator('#adm-balance').filter({ hasText: String(u.balance) }).waitFor();
  const today = u.days[u.days.length - 1];
  assert.ok(today.runs >= 2, JSON.stringify(today));
  for (const [title, key] of [['Runs per day by state', 'by_state'], ['Runs per day by language', 'by_language'],
    ['Runs per day by interface', 'by_via']]) {
    const fig = p.locator('figure').filter({ has: p.getByText(title, { exact: true }) });
    const chart = fig.getByRole('img');
    const label = await chart.getAttribute('aria-label');
    const total = u.days.reduce((a, d) => a + d.runs, 0);
    assert.ok(label.startsWith(`${title}: ${total} in the last ${u.days.length} days`), label);
    assert.ok((await fig.locator('rect').count()) >= 1, `${title}: no bar drawn`);
    // the numbers as a table (one click away), today's row matching the API's
    await fig.locator('summary').click();
    const cells = await fig.getByRole('table').getByRole('row').filter({ hasText: today.date }).getByRole('cell').allTextContents();
    const heads = await fig.getByRole('table').getByRole('columnheader').allTextContents();
    const words = { rest: 'REST', mcp: 'MCP', piston: 'Piston', e2b: 'E2B' };
    for (const [k, v] of Object.entries(today[key])) {
      // interfaces and states in words: REST, "timed out"
      const col = heads.indexOf(key === 'by_via' ? (words[k] || k) : key === 'by_state' ? k.replace(/_/g, ' ') : k);
      assert.ok(col > 0, `${title}: no column ${k} in ${heads}`);
      assert.equal(cells[col], String(v), `${title}: ${k} today`);
    }
  }
  const ledger = p.getByRole('table', { name: 'Credit ledger, newest first' });
  assert.equal(await ledger.locator('tbody tr').count(), u.ledger.length);
  await finish('admin-usage', s);
});

test('audit: the chain verifies, the latest checkpoint is shown, events filter by kind, run and person, and the export downloads them', async (t) => {
  const s = await page('admin', '#/audit');
  const { p } = s;
  const v = (await api('GET', '/v1/audit/verify')).doc;
  assert.equal(v.ok, true);
  await p.getByText('The chain is intact', { exact: false }).waitFor();
  await p.getByText('Verified', { exact: true }).waitFor();
  assert.doesNotMatch(await p.getByRole('status').filter({ hasText: 'The chain is intact' }).textContent(), /null|undefined/);
  const cp = (await api('GET', '/v1/audit/checkpoint')).doc;
  await p.getByLabel('Signed checkpoint').filter({ hasText: `airlock/audit/${cp.workspace_id}` }).waitFor();
  // filter by kind: only that kind's rows
  await p.getByLabel('Kind', { exact: true }).fill('settings.changed');
  await p.getByRole('button', { name: 'Filter' }).click();
  const want = (await api('GET', '/v1/audit?kind=settings.changed&limit=50')).doc.events;
  const rows = p.getByRole('table', { name: /^Audit events/ }).locator('tbody tr');
  await p.getByRole('table', { name: `Audit events (${want.length} shown, newest first)` }).waitFor();
  assert.equal(await rows.count(), want.length);
  for (const k of await rows.locator('td:nth-child(3)').allTextContents()) assert.equal(k, 'settings.changed');
  // the export: ndjson, the same filter
  const [download] = await Promise.all([p.waitForEvent('download'), p.getByRole('link', { name: 'Download' }).click()]);
  const path = await download.path();
  const { readFile } = await import('node:fs/promises');
  const lines = (await readFile(path, 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(lines.length >= 1);
  for (const e of lines) assert.equal(e.kind, 'settings.changed');
  // by run and person: a run's own events, each row naming it
  const run = (await api('GET', '/v1/runs?limit=1')).doc.runs[0];
  const byRun = (await api('GET', `/v1/audit?run_id=${run.id}&person_id=${run.requested_by.id}&limit=50`)).doc.events;
  assert.ok(byRun.length >= 2, JSON.stringify(byRun.map((e) => e.kind)));
  await p.getByLabel('Kind', { exact: true }).fill('');
  await p.getByLabel('Run', { exact: true }).fill(run.id);
  await p.getByLabel('Person', { exact: true }).selectOption(run.requested_by.id);
  await p.getByRole('button', { name: 'Filter' }).click();
  await p.getByRole('table', { name: `Audit events (${byRun.length} shown, newest first)` }).waitFor();
  for (const r of await rows.locator('td:nth-child(5)').allTextContents()) assert.equal(r, run.id);
  await finish('admin-audit', s);
});

test('skills: the workspace\'s and the bundled skills; the test bench runs entrypoints from their forms and shows output and artifacts; Promote', async (t) => {
  const s = await page('admin', '#/skills');
  const { p } = s;
  const list = p.getByRole('list', { name: 'Bundled skills' });
  for (const n of ['chart-builder', 'csv-cleaner', 'data-profiler', 'calendar-scheduler', 'pdf-report'])
    await list.getByRole('listitem').filter({ has: p.getByRole('heading', { name: n, exact: true }) }).waitFor();
  // the workspace's own skill, not promoted: its bench form with every input type, then Promote
  const ours = p.getByRole('list', { name: "The workspace's skills" }).getByRole('listitem')
    .filter({ has: p.getByRole('heading', { name: 'greeter', exact: true }) });
  await ours.getByText('Not promoted', { exact: true }).waitFor();
  await p.getByRole('button', { name: 'Test greeter' }).click();
  await p.getByLabel(/^who/).fill('Ada');
  await p.getByLabel(/^times/).fill('2');
  await p.getByLabel(/^shout/).selectOption('true');
  await p.getByLabel(/^mood/).selectOption('"loud"');
  await p.getByLabel(/^tags/).fill('first\n\n second \n');
  await p.getByRole('button', { name: 'Run test' }).click();
  await p.locator('.adm-run-state').filter({ hasText: 'succeeded' }).waitFor({ timeout: 60_000 });
  assert.deepEqual(JSON.parse(await p.getByLabel('Standard output').textContent()),
    { who: 'Ada', times: 2, shout: true, mood: 'loud', tags: ['first', 'second'] });
  await p.getByRole('link', { name: 'Download greeting.txt' }).waitFor();
  // a required field left empty is caught in the page, nothing run
  await p.getByLabel(/^who/).fill('');
  await p.getByRole('button', { name: 'Run test' }).click();
  await p.getByText('Not run: who is required.', { exact: true }).waitFor();
  // the list and the bench both offer it; the bench's names the version it promotes
  await ours.getByRole('button', { name: 'Promote greeter', exact: true }).waitFor();
  await p.getByRole('button', { name: 'Promote greeter 0.1.0', exact: true }).click();
  await ours.getByText('Promoted', { exact: true }).waitFor();
  assert.equal((await api('GET', '/v1/skills/greeter')).doc.state, 'promoted');
  assert.equal(await p.getByRole('button', { name: 'Promote greeter' }).count(), 0);

  await p.getByRole('button', { name: 'Test pdf-report' }).click();
  await p.getByLabel('Entrypoint').selectOption('build');
  await p.getByLabel(/^markdown/).fill('# Console bench\n\nMade from the form.');
  await p.getByLabel(/^title/).fill('Bench report');
  await p.getByLabel(/^output/).fill('bench.pdf');
  await p.getByLabel(/^page_size/).selectOption('"letter"');
  await p.getByRole('button', { name: 'Run test' }).click();
  await p.locator('.adm-run-state').filter({ hasText: 'succeeded' }).waitFor({ timeout: 180_000 });
  const runId = (await p.getByRole('link', { name: "Open the run's page" }).getAttribute('href')).split('/').pop();
  const run = (await api('GET', `/v1/runs/${runId}`)).doc;
  assert.equal(run.skill.name, 'pdf-report');
  assert.equal(run.skill.mode, 'test');
  assert.equal(run.state, 'succeeded');
  // the form's arguments reached the script: it wrote the file named, one page of it
  assert.deepEqual(JSON.parse(run.result.stdout), { output: 'bench.pdf', pages: 1 });
  assert.equal(await p.getByLabel('Standard output').textContent(), run.result.stdout);
  const [download] = await Promise.all([p.waitForEvent('download'),
    p.getByRole('link', { name: 'Download bench.pdf' }).click()]);
  const { readFile } = await import('node:fs/promises');
  const bytes = await readFile(await download.path());
  assert.equal(bytes.subarray(0, 5).toString(), '%PDF-');
  assert.equal(bytes.length, run.artifacts.find((a) => a.path === 'bench.pdf').size);
  await finish('admin-skills', s);
});
