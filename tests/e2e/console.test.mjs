// The web console in a real browser (Debian's Chromium, playwright-core)
// against a real `airlock serve` (tests/integration/test_console.py made
// its people: an admin, an approver and a member of one workspace whose
// policy asks approval for every run, and a person of another
// organisation, each with login links from `airlock admin login-link`).
// Every page shown is screenshot at 1280x800 and 390x844 and checked by
// axe-core (console_util.mjs: check).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { apiCall, BASE, check, env, fresh, launch, NARROW, newLink, pageFetch, poll, signInAs } from './console_util.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const stamp = Date.now().toString(36);
const seen = [];   // ids of this workspace's runs, for the other tenant's test

async function ask(who, body) {
  const { status, doc } = await apiCall(who, 'POST', '/v1/runs', { language: 'python', ...body });
  assert.equal(status, 201, JSON.stringify(doc));
  seen.push(doc.id);
  return doc;
}

async function runState(id, want, timeout = 60_000) {
  return poll(async () => {
    const { doc } = await apiCall('admin', 'GET', `/v1/runs/${id}`);
    return want.includes(doc.state) ? doc : null;
  }, `run ${id} to be ${want.join(' or ')}`, timeout);
}

async function session(fn) {
  const opened = [];
  try {
    return await fn(async (who, opts) => { const s = await signInAs(browser, who, opts); opened.push(s.context); return s; });
  } finally {
    for (const c of opened) await c.close();
  }
}

test('sign in with a login link: the token leaves the address bar, the header says who; Sign out ends the session', () => session(async (as) => {
  const { page } = await as('admin');
  assert.ok(!page.url().includes('token'), page.url());
  const header = page.locator('header');
  await header.getByText('admin', { exact: true }).waitFor();
  await header.getByRole('link', { name: /pending approval/ }).waitFor();
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Settings' }).waitFor();
  const who = await pageFetch(page, 'GET', '/v1/session');
  assert.equal(who.status, 200);
  assert.equal(who.doc.via, 'session');
  assert.equal(who.doc.person.id, env('AIRLOCK_PERSON_ADMIN'));
  // /login while signed in is the console itself
  await page.goto(`${BASE()}/login`);
  await page.waitForURL(/\/#\/activity$/);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(/\/login$/);
  await page.getByRole('heading', { name: 'You are signed out' }).waitFor();
  await check(page, 'signed-out');
  assert.equal((await pageFetch(page, 'GET', '/v1/session', undefined, { csrf: false })).status, 401);
}));

test('a reused and an expired login link are refused on the page, saying how to get a new one', async () => {
  const link = newLink('member');
  const token = new URL(link).hash.replace('#token=', '');
  const first = await fetch(`${BASE()}/v1/session`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }) });
  assert.equal(first.status, 201);
  for (const [what, url] of [['used', link], ['expired', env('AIRLOCK_LINK_EXPIRED')]]) {
    const { context, page } = await fresh(browser);
    try {
      await page.goto(url);
      await page.getByRole('heading', { name: 'This sign-in link cannot be used' }).waitFor();
      const alert = page.getByRole('alert');
      assert.match(await alert.innerText(), what === 'used' ? /used/ : /expired/);
      await page.getByText('airlock admin login-link --person').first().waitFor();
      assert.ok(!page.url().includes('token'), page.url());
      assert.equal((await context.cookies()).length, 0);
      if (what === 'used') await check(page, 'signin-refused');
    } finally {
      await context.close();
    }
  }
});

test('a run requested through the API appears in Activity and changes state live, without a reload', () => session(async (as) => {
  const { page } = await as('member');
  const pending = page.locator('#pending-count .count');
  const before = Number(await pending.innerText());
  await page.evaluate(() => { window.__sameDocument = true; });
  const tag = `live ${stamp}`;
  const run = await ask('member', { code: 'print("hello from the console test")', description: tag });
  const row = page.locator(`tr[data-run="${run.id}"]`);
  await row.waitFor({ timeout: 20_000 });
  await row.getByText(tag).waitFor();
  await row.getByText('pending approval').waitFor();
  await row.getByText('Max Member').waitFor();
  // and which of Max's agents: the key's name, muted, beside the person
  await row.locator('.who-key', { hasText: 'ci-agent' }).waitFor();
  await row.getByText('REST').waitFor();
  await poll(async () => Number(await pending.innerText()) === before + 1, 'the header to count it');
  assert.equal((await apiCall('approver', 'POST', `/v1/runs/${run.id}/approve`, {})).status, 200);
  await row.getByText('succeeded').waitFor({ timeout: 30_000 });
  await poll(async () => Number(await pending.innerText()) === before, 'the header to count it out');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  // filtered by state, only the matching runs stay
  await page.getByLabel('State').selectOption('pending_approval');
  await poll(async () => (await page.locator(`tr[data-run="${run.id}"]`).count()) === 0, 'the filter to hide it');
  await page.getByLabel('State').selectOption('');
  await row.waitFor();
  await check(page, 'activity', page.locator('tbody tr'));
  // the key's name leads to that agent's runs (key_id); "Show every key" back
  await row.locator('.who-key').click();
  await poll(async () => page.url().includes('key='), 'the address to name the key');
  await page.locator('.key-filter').getByText('ci-agent').waitFor();
  await check(page, 'activity-key', row);
  await page.getByRole('button', { name: 'Show every key' }).click();
  await poll(async () => !page.url().includes('key='), 'the key filter to clear');
  await row.waitFor();
}));

test('an approver approves a pending run from its card; it runs and its output streams on its page', () => session(async (as) => {
  const code = 'import time\nprint("first line", flush=True)\ntime.sleep(3)\nprint("second line", flush=True)\n';
  const run = await ask('member', { code, description: `stream ${stamp}`, stdin: 'the input', args: ['--rows', '3'] });
  const { page } = await as('approver');
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Approvals' }).click();
  const card = page.locator(`article[data-run="${run.id}"]`);
  await card.waitFor();
  // the exact code, the inputs, who asked
  assert.equal((await card.locator('.code pre').innerText()).trimEnd(), code.trimEnd());
  await card.getByText('Max Member').waitFor();
  await card.locator('.who-key', { hasText: 'ci-agent' }).waitFor();
  await card.getByText('Stdin').waitFor();
  await card.getByText('"--rows" "3"').waitFor();
  await check(page, 'approvals', card);
  await card.getByRole('button', { name: 'Approve' }).click();
  // the card moves to the decided ones, saying who approved it
  await page.locator(`article.decided-approved[data-run="${run.id}"]`).getByText('Ada Approver').waitFor();
  assert.equal(await page.locator(`article.approval:not([class*="decided"])[data-run="${run.id}"]`).count(), 0);
  await page.goto(`${BASE()}/#/runs/${run.id}`);
  await page.getByText('Max Member (member) · ci-agent').waitFor();
  // the first line is shown while the run still runs
  await page.locator('pre.output', { hasText: 'first line' }).waitFor({ timeout: 30_000 });
  assert.ok(!(await page.locator('pre.output').innerText()).includes('second line'), 'not streamed: both lines came at once');
  await page.locator('pre.output', { hasText: 'second line' }).waitFor({ timeout: 30_000 });
  await page.getByText('Complete output.').waitFor({ timeout: 30_000 });
  await page.locator('section[aria-label="Approval"]').getByText('Ada Approver').waitFor();
  await page.locator('section[aria-label="Overview"] .badge', { hasText: 'succeeded' }).waitFor();
  await check(page, 'run', page.locator('section[aria-label="Code"]'));
}));

test('the requester sees no Approve on their own run, and the API refuses it', () => session(async (as) => {
  const run = await ask('approver', { code: 'print(2)', description: `own ${stamp}` });
  const { page } = await as('approver');
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`article[data-run="${run.id}"]`);
  await card.getByText('You asked for this run').waitFor();
  assert.equal(await card.getByRole('button', { name: 'Approve' }).count(), 0);
  assert.equal(await card.getByRole('button', { name: 'Deny' }).count(), 0);
  await card.getByRole('button', { name: 'Withdraw' }).waitFor();
  const r = await pageFetch(page, 'POST', `/v1/runs/${run.id}/approve`, {});
  assert.equal(r.status, 403, JSON.stringify(r.doc));
  assert.equal(r.doc.error.code, 'separation_of_duties');
  // a member decides nothing: no Approve on another's card either
  const m = await as('member');
  await m.page.goto(`${BASE()}/#/approvals`);
  const theirs = m.page.locator(`article[data-run="${run.id}"]`);
  await theirs.getByText('An admin or approver decides this run.').waitFor();
  assert.equal(await theirs.getByRole('button', { name: 'Approve' }).count(), 0);
  assert.equal((await pageFetch(m.page, 'POST', `/v1/runs/${run.id}/approve`, {})).status, 403);
  // the requester withdraws it from the card
  await card.getByRole('button', { name: 'Withdraw' }).click();
  await page.locator(`article.decided-canceled[data-run="${run.id}"]`).getByText('Withdrawn by').waitFor();
  await runState(run.id, ['canceled']);
}));

test('deny with a reason: the card says who, when and why, and so does the run', () => session(async (as) => {
  const run = await ask('member', { code: 'import os\nprint(os.listdir("/"))', description: `deny ${stamp}` });
  const { page } = await as('approver');
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`article[data-run="${run.id}"]`);
  await card.getByRole('button', { name: 'Deny' }).click();
  const reason = `not needed for the report ${stamp}`;
  await card.getByLabel('Reason for denying').fill(reason);
  await card.getByRole('button', { name: 'Deny run' }).click();
  const decided = page.locator(`article.decided-denied[data-run="${run.id}"]`);
  await decided.getByText(reason).waitFor();
  await decided.getByText('Ada Approver').waitFor();
  const done = await runState(run.id, ['denied']);
  assert.equal(done.approval.decision, 'denied');
  assert.equal(done.approval.reason, reason);
}));

test('download an artifact from its thread and check its bytes; the CSV preview is a table', () => session(async (as) => {
  const thread = `report-${stamp}`;
  const csv = 'region,revenue\nnorth,120\nsouth,95\n';
  const run = await ask('member', { thread_id: thread, description: `artifact ${stamp}`,
    code: `open("/out/report.csv", "w").write(${JSON.stringify(csv)})
open("/out/big.log", "w").write("".join(f"line {i}\\n" for i in range(100000)))
open("/out/report.pdf", "wb").write(b"%PDF-1.4\\n%%EOF\\n")
print("written")` });
  assert.equal((await apiCall('approver', 'POST', `/v1/runs/${run.id}/approve`, {})).status, 200);
  await runState(run.id, ['succeeded']);
  const { page } = await as('member');
  await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Threads' }).click();
  await page.getByRole('link', { name: thread }).waitFor();
  await check(page, 'threads', page.locator('tbody tr'));
  await page.getByRole('link', { name: thread }).click();
  await page.getByRole('tab', { name: /Artifacts/ }).waitFor();
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: 'Download report.csv' }).click(),
  ]);
  assert.equal(download.suggestedFilename(), 'report.csv');
  assert.equal(await readFile(await download.path(), 'utf8'), csv);
  await page.getByRole('button', { name: 'Preview report.csv' }).click();
  await page.getByRole('cell', { name: 'north' }).waitFor();
  await page.getByRole('columnheader', { name: 'revenue' }).waitFor();
  // a log past 64 KiB: its first lines, and a note that it is cut; a PDF offers its download, no Preview
  await page.getByRole('button', { name: 'Preview big.log' }).click();
  await page.getByText(/^The first 6\d\.\d KiB of 1\.0 MiB; download it/).waitFor();
  assert.match(await page.getByLabel('Content of big.log').textContent(), /^line 0\nline 1\n[^]*\n$/);
  assert.equal(await page.getByRole('button', { name: 'Preview report.pdf' }).count(), 0);
  await page.getByRole('link', { name: 'Download report.pdf' }).waitFor();
  await page.getByRole('button', { name: 'Preview big.log' }).click();
  await check(page, 'thread', page.getByRole('cell', { name: 'north' }));
  await page.getByRole('tab', { name: /Runs/ }).click();
  await page.locator(`tr[data-run="${run.id}"]`).waitFor();
  // and Activity filtered by the thread, from the address
  await page.getByRole('link', { name: "This thread's runs in Activity" }).click();
  await page.locator(`tr[data-run="${run.id}"]`).waitFor();
  assert.equal(await page.getByLabel('Thread').inputValue(), thread);
  assert.equal(await page.locator('tbody tr').count(), 1);
}));

test("another tenant's runs never appear, and are not found by id", () => session(async (as) => {
  assert.ok(seen.length > 0);
  const { page } = await as('other');
  await page.getByRole('heading', { name: 'No runs yet' }).waitFor();
  // the empty state says what to paste, with this service's URL
  await page.getByText(`${BASE()}/mcp`).waitFor();
  await page.getByText(`E2B_API_URL=${BASE()}`).waitFor();
  for (const id of seen) assert.equal(await page.locator(`tr[data-run="${id}"]`).count(), 0);
  assert.equal((await pageFetch(page, 'GET', `/v1/runs/${seen[0]}`)).status, 404);
  await page.goto(`${BASE()}/#/runs/${seen[0]}`);
  await page.getByRole('alert').waitFor();
  await page.goto(`${BASE()}/#/activity`);
  await check(page, 'activity-empty', page.getByRole('heading', { name: 'No runs yet' }));
}));

test('a change without the CSRF token is refused, from the page itself', () => session(async (as) => {
  const { page } = await as('member');
  const body = { language: 'python', code: 'print(3)', description: `csrf ${stamp}` };
  const bare = await pageFetch(page, 'POST', '/v1/runs', body, { csrf: false });
  assert.equal(bare.status, 403, JSON.stringify(bare.doc));
  assert.equal(bare.doc.error.code, 'csrf_required');
  const withToken = await pageFetch(page, 'POST', '/v1/runs', body);
  assert.equal(withToken.status, 201, JSON.stringify(withToken.doc));
  seen.push(withToken.doc.id);
  await apiCall('member', 'POST', `/v1/runs/${withToken.doc.id}/cancel`);
}));

test('a member sees no admin pages in the nav; at phone width the nav is a menu', () => session(async (as) => {
  const { page } = await as('member', { viewport: NARROW });
  const nav = page.getByRole('navigation', { name: 'Console' });
  const menu = page.getByRole('button', { name: 'Menu' });
  assert.equal(await nav.isVisible(), false);
  await menu.click();
  await nav.getByRole('link', { name: 'Approvals' }).waitFor();
  const names = await nav.getByRole('link').allInnerTexts();
  for (const admin of ['Settings']) assert.ok(!names.includes(admin), `${admin} in a member's nav: ${names}`);
  assert.equal(await menu.getAttribute('aria-expanded'), 'true');
  await page.screenshot({ path: `${env('AIRLOCK_SCREENSHOTS')}/nav-open-390.png` });
  // Escape closes it and gives focus back to the Menu button
  await page.keyboard.press('Escape');
  assert.equal(await nav.isVisible(), false);
  assert.equal(await menu.getAttribute('aria-expanded'), 'false');
  assert.equal(await page.evaluate(() => document.activeElement.textContent.trim()), 'Menu');
  await menu.click();
  await nav.getByRole('link', { name: 'Threads' }).click();
  await page.getByRole('heading', { name: 'Threads', level: 1 }).waitFor();
  assert.equal(await nav.isVisible(), false);
  // and the API refuses what the nav does not offer
  assert.equal((await pageFetch(page, 'PUT', '/v1/settings', { approval_policy: 'never' })).status, 403);
}));

test('Sandboxes lists the workspace\'s E2B sandboxes with their files and time left; Kill ends one', () => session(async (as) => {
  const r = await fetch(`${BASE()}/sandboxes`, { method: 'POST',
    headers: { 'X-API-KEY': env('AIRLOCK_KEY_MEMBER'), 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', timeout: 600 }) });
  const created = await r.text();
  assert.equal(r.status, 201, created);
  const sbx = JSON.parse(created).sandboxID;
  const { page } = await as('member');
  await page.goto(`${BASE()}/#/sandboxes`);
  const row = page.locator(`tr[data-sandbox="${sbx}"]`);
  await row.getByText('running').waitFor();
  await row.getByText('Max Member').waitFor();
  await row.getByText(/min .* left/).waitFor();
  await check(page, 'sandboxes', row);
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: `Kill ${sbx}` }).click();
  await row.waitFor({ state: 'detached' });
  const gone = await fetch(`${BASE()}/sandboxes/${sbx}`, { headers: { 'X-API-KEY': env('AIRLOCK_KEY_MEMBER') } });
  assert.equal(gone.status, 404);
}));

// --- a thread's own environment (issue 38) -----------------------------------
// test_console.py's service installs from the tests' own Python index; its
// package's module holds its version, which each page must show as served.
const PY_NAME = (n) => new RegExp(n.replace(/[-_.]+/g, '[-_.]'), 'i');

test("a thread's packages: the card names them, the run's page shows the install and its output, the thread its version", () => session(async (as) => {
  const spec = env('AIRLOCK_PKG_SPEC'), version = env('AIRLOCK_PKG_VERSION'), mod = env('AIRLOCK_PKG_MODULE');
  const name = PY_NAME(env('AIRLOCK_PKG_NAME'));
  const thread = `pkgs-${stamp}`;
  const run = await ask('member', { thread_id: thread, description: `packages ${stamp}`, packages: { python: [spec] },
    code: `import ${mod}\nprint("imported", ${mod}.VERSION)` });
  const { page } = await as('approver');
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`article[data-run="${run.id}"]`);
  const asked = card.locator(`tr[data-package="${spec}"]`);
  await asked.getByText('asked by this run').waitFor();
  assert.equal((await asked.locator('td.mono').innerText()).trim(), spec);
  await check(page, 'approval-packages', asked);
  await card.getByRole('button', { name: 'Approve' }).click();
  await page.locator(`article.decided-approved[data-run="${run.id}"]`).waitFor();
  // the run's page, live: what was asked, what the install made, pip's own words
  await page.goto(`${BASE()}/#/runs/${run.id}`);
  const pk = page.locator('section[aria-label="Packages"]');
  await pk.locator(`tr[data-package="${spec}"]`).waitFor();
  const installed = pk.locator('table.packages-installed tbody tr');
  await installed.first().waitFor({ timeout: 60_000 });
  await page.getByText('Complete output.').waitFor({ timeout: 60_000 });
  assert.match(await page.locator('pre.output[aria-label="Output"]').textContent(), new RegExp(`^imported ${version.replace(/\./g, '\\.')}\\n?$`));
  const done = await runState(run.id, ['succeeded']);
  const res = done.result.packages;
  assert.equal(res.reused, false);
  const cells = await installed.first().locator('td').allInnerTexts();
  assert.equal(cells[0], 'Python');
  assert.match(cells[1], name);
  assert.equal(cells[2], version);
  assert.equal(cells[3], res.python[0].sha256.slice(0, 12) + '…');
  await pk.getByText(res.layer.slice(0, 19) + '…').waitFor();
  await pk.getByText(/^installed for this run in /).waitFor();
  const output = async () => (await pk.getByLabel('Install output').count()) && pk.getByLabel('Install output').innerText();
  await poll(async () => name.test(await output() || ''), "the installer's output");
  // the same page read again after the end: the install's output comes from the run's events
  await page.reload();
  await page.getByText('Complete output.').waitFor();
  await poll(async () => name.test(await output() || ''), "the installer's output, after the end");
  await check(page, 'run-packages', pk.locator('table.packages-installed'));
  // the thread: its set, with the version its layer holds
  await page.goto(`${BASE()}/#/threads/${encodeURIComponent(thread)}`);
  const row = page.locator(`section[aria-label="Packages"] tr[data-package="${spec}"]`);
  await row.waitFor();
  assert.deepEqual(await row.locator('td').allInnerTexts(), ['python', spec, version]);
  await page.locator('section[aria-label="Packages"]').getByText(res.layer.slice(0, 19) + '…').waitFor();
  await check(page, 'thread-packages', row);
  // an install that fails: the run's page says so, with pip's own words (the run never started)
  const bad = await ask('member', { description: `no package ${stamp}`, packages: { python: ['no-such-package-airlock==9.9'] },
    code: 'print("never")' });
  assert.equal((await apiCall('approver', 'POST', `/v1/runs/${bad.id}/approve`, {})).status, 200);
  const failed = await runState(bad.id, ['failed']);
  assert.equal(failed.result.reason, 'install_failed');
  await page.goto(`${BASE()}/#/runs/${bad.id}`);
  const badPk = page.locator('section[aria-label="Packages"]');
  await badPk.getByText(/^The install failed, so the run never started/).waitFor();
  await poll(async () => /no-such-package-airlock/.test(await badPk.getByLabel('Install output').textContent()), "pip's refusal");
  assert.equal(await page.locator('pre.output[aria-label="Output"]').textContent(), '(no output)');
}));

test("a connected folder's files are in the run's manifest, a file named as markup shown as text", () => session(async (as) => {
  const folder = env('AIRLOCK_FOLDER'), hostile = env('AIRLOCK_FOLDER_HOSTILE');
  const run = await ask('member', { description: `folder ${stamp}`, folders: [{ folder, paths: ['.'] }],
    code: `import os\nfor n in sorted(os.listdir("/work/documents/${folder}")): print(n)` });
  const { page } = await as('approver');
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`article[data-run="${run.id}"]`);
  for (const f of ['q3.csv', hostile]) await card.getByRole('cell', { name: `${folder}: ${f}`, exact: true }).waitFor();
  const kinds = await card.getByRole('cell', { name: 'Folder file', exact: true }).count();
  assert.equal(kinds, 2);
  assert.equal(await page.locator('img[src="x"]').count(), 0, 'the name became markup on the card');
  assert.equal((await apiCall('approver', 'POST', `/v1/runs/${run.id}/approve`, {})).status, 200);
  const done = await runState(run.id, ['succeeded']);
  assert.deepEqual(done.imports.map((i) => i.path).sort(), ['q3.csv', hostile].sort());
  await page.goto(`${BASE()}/#/runs/${run.id}`);
  const inputs = page.locator('section[aria-label="Inputs"]');
  const cell = inputs.getByRole('cell', { name: `${folder}: ${hostile}`, exact: true });
  await cell.waitFor();
  // the sha256 the run pinned, beside it
  const hostileRow = inputs.locator('tr', { has: page.getByRole('cell', { name: `${folder}: ${hostile}`, exact: true }) });
  const pinned = done.imports.find((i) => i.path === hostile).sha256;
  assert.equal(await hostileRow.locator('td').nth(3).getAttribute('title'), pinned);
  // the box had it under its name, which the output shows as text too
  await page.getByText('Complete output.').waitFor();
  assert.equal(await page.locator('pre.output[aria-label="Output"]').textContent(), ['q3.csv', hostile].sort().join('\n') + '\n');
  assert.equal(await page.locator('img[src="x"]').count(), 0, 'the name became markup on the run page');
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await check(page, 'run-folder', cell);
}));
