// An attacker's review of the web console (tests/integration/test_console.py,
// test_console_against_a_hostile_agent): what an agent of the workspace (a
// member's key) controls, read by the workspace's admin in the console.
// Each attack is first shown working against a control in the same
// browser (the payload parsed as HTML in a blank page, the artifact served
// inline from the console's origin, the code in a plain <pre>, a page
// without the console's headers framed), then failing against airlock.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { apiCall, BASE, check, env, fresh, launch, newLink, poll, signIn, signInAs } from './console_util.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const XSS = () => env('AIRLOCK_XSS');
const stamp = Date.now().toString(36);

// a run the member (the hostile agent) asks for; the policy holds it for approval
async function ask(body) {
  const { status, doc } = await apiCall('member', 'POST', '/v1/runs', { language: 'python', ...body });
  assert.equal(status, 201, JSON.stringify(doc));
  return doc;
}

// A page that notes anything the payload does: its marker, a CSP refusal
// (the page must not build markup and count on the policy to stop it) and
// a request for the payload's src=x.
async function watched(page) {
  page.fetchedX = [];
  page.on('request', (r) => { if (new URL(r.url()).pathname === '/x') page.fetchedX.push(r.url()); });
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
}

async function noMarkupRan(page, where) {
  const got = await page.evaluate(() => ({
    pwned: window.__pwned || 0,
    csp: window.__csp || [],
    planted: document.querySelectorAll('img[src="x"], svg[onload], [onerror], [onload]').length,
  }));
  assert.deepEqual(got, { pwned: 0, csp: [], planted: 0 }, `markup ran or was built on ${where}`);
  assert.deepEqual(page.fetchedX, [], `the payload's image was fetched on ${where}`);
}

test('markup an agent writes is shown as text on every page (control: parsed as HTML it runs)', async () => {
  // the control: the same payload through innerHTML in a blank page runs
  const { context: c0, page: p0 } = await fresh(browser);
  await p0.setContent('<div id="c"></div>');
  await p0.evaluate((x) => { document.getElementById('c').innerHTML = x; }, XSS());
  await poll(() => p0.evaluate(() => window.__pwned === 1), 'the control payload to run', 5000);
  await c0.close();

  const thread = `t-${stamp}`;
  const run = await ask({ description: XSS(), thread_id: thread, code: `print(${JSON.stringify(XSS())})\n# ${XSS()}\n` });
  const { context, page } = await fresh(browser);
  await watched(page);
  await page.goto(newLink('admin'));
  await page.waitForURL(/\/#\/activity$/);
  const row = page.locator('tbody tr', { hasText: run.id.slice(0, 10) });
  await row.waitFor();
  // the description reads as the agent wrote it, character for character
  assert.ok((await row.innerText()).includes(XSS().slice(0, 30)), await row.innerText());
  await noMarkupRan(page, 'Activity');
  for (const [hash, ready] of [[`#/approvals`, `[data-run="${run.id}"]`], [`#/runs/${run.id}`, '.code'],
    [`#/threads/${thread}`, 'main h1'], ['#/audit', 'table']]) {
    await page.goto(`${BASE()}/${hash}`);
    await page.locator(ready).first().waitFor();
    await noMarkupRan(page, hash);
  }
  // the approval card shows the code and the description as text
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`[data-run="${run.id}"]`);
  assert.ok((await card.locator('.code pre').innerText()).includes(XSS()));
  assert.ok((await card.locator('.title').innerText()).includes(XSS().slice(0, 30)));
  await noMarkupRan(page, 'Approvals');
  await context.close();
});

test('code awaiting approval cannot read other than it runs: invisible characters shown, long lines flagged', async () => {
  // Trojan Source (CVE-2021-42574): the override makes the check read as a
  // comment; and a statement pushed far right of a harmless one
  const code = 'access_level = "user"\n' +
    'if access_level != "user\u202e \u2066# Check if admin\u2069 \u2066":\n' +
    '    print("You are an admin.")\n' +
    'x = 1' + ' '.repeat(300) + '; print("out of sight")\n';
  // the control: shown in a plain <pre>, the override is there and invisible
  const { context: c0, page: p0 } = await fresh(browser);
  await p0.setContent('<pre id="c"></pre>');
  const plain = await p0.evaluate((t) => { const e = document.getElementById('c'); e.textContent = t; return e.innerText; }, code);
  assert.ok(plain.includes('\u202e') && !plain.includes('U+202E'));
  await c0.close();

  const run = await ask({ description: `trojan ${stamp}`, code });
  const { context, page } = await signInAs(browser, 'admin');
  await page.goto(`${BASE()}/#/approvals`);
  const card = page.locator(`[data-run="${run.id}"]`);
  await card.waitFor();
  const shown = await card.locator('.code pre').innerText();
  assert.ok(!/[\u202a-\u202e\u2066-\u2069]/.test(shown), 'a bidi control reached the screen unmarked');
  assert.ok(shown.includes('\u27e8U+202E\u27e9') && shown.includes('\u27e8U+2066\u27e9'), shown);
  const warning = await card.locator('.code-warning').innerText();
  assert.match(warning, /4 invisible characters/);
  assert.match(warning, /change the order/);
  assert.match(warning, /Line 4 is longer than 160 characters/);
  await check(page, 'attack-trojan-source', card);
  // the run's page flags it the same way
  await page.goto(`${BASE()}/#/runs/${run.id}`);
  await page.locator('.code-warning').waitFor();
  await context.close();
});

test('an HTML artifact opened from the console is a download and runs nothing (control: served inline it reads the session)', async () => {
  const html = '<!doctype html><title>artifact</title><script>fetch("/v1/session").then((r) => r.json())' +
    '.then((s) => { document.title = "PWNED " + s.person.id; })</script>';
  const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><script>window.__pwned=1</script>' +
    '<rect width="40" height="40" fill="#c33"/></svg>';
  const run = await ask({
    description: `artifacts ${stamp}`,
    code: `open("/out/page.html", "w").write(${JSON.stringify(html)})\n` +
      `open("/out/pic.svg", "w").write(${JSON.stringify(svg)})\n` +
      `open("/out/invoice\\u202efdp.exe", "w").write("MZ")\n`,
  });
  assert.equal((await apiCall('admin', 'POST', `/v1/runs/${run.id}/approve`, {})).status, 200);
  const done = await poll(async () => {
    const { doc } = await apiCall('admin', 'GET', `/v1/runs/${run.id}`);
    return ['succeeded', 'failed', 'error', 'timed_out'].includes(doc.state) ? doc : null;
  }, 'the artifacts run to end', 60_000);
  assert.equal(done.state, 'succeeded', JSON.stringify(done.result));
  const art = (path) => done.artifacts.find((a) => a.path.endsWith(path));
  assert.ok(art('page.html') && art('pic.svg'), JSON.stringify(done.artifacts));

  const { context, page } = await signInAs(browser, 'admin');
  const me = (await (await page.request.get(`${BASE()}/v1/session`)).json()).person.id;
  // the control: the same bytes served inline from the console's origin
  // read the person's session with their cookie
  await page.route(`${BASE()}/control/page.html`, (r) => r.fulfill({ status: 200, contentType: 'text/html', body: html }));
  await page.goto(`${BASE()}/control/page.html`);
  await poll(async () => (await page.title()) === `PWNED ${me}`, 'the inline control to read the session', 5000);
  await page.unroute(`${BASE()}/control/page.html`);

  // airlock: the content is an attachment, not sniffed, and sandboxed
  const url = `${BASE()}/v1/artifacts/${encodeURIComponent(art('page.html').id)}/content`;
  const r = await page.request.get(url);
  assert.equal(r.status(), 200);
  assert.equal(r.headers()['content-disposition'], 'attachment');
  assert.equal(r.headers()['x-content-type-options'], 'nosniff');
  assert.match(r.headers()['content-security-policy'], /\bsandbox\b/);
  // opened in the tab, it downloads; framed by the console's own page, it shows nothing
  await page.goto(`${BASE()}/#/runs/${run.id}`);
  await page.locator('tr[data-artifact]').first().waitFor();
  const dl = page.waitForEvent('download');
  await page.evaluate((u) => { location.href = u; }, url);
  await dl;
  const framed = await page.evaluate(async (u) => {
    const f = document.createElement('iframe');
    f.src = u;
    document.body.append(f);
    await new Promise((res) => setTimeout(res, 1500));
    let title = null;
    try { title = f.contentDocument && f.contentDocument.title; } catch { title = 'cross-origin'; }
    return { title, top: document.title };
  }, url);
  assert.ok(!String(framed.title).startsWith('PWNED') && !framed.top.startsWith('PWNED'), JSON.stringify(framed));

  // the SVG's preview draws as an image, and its blob: address (this
  // origin's) is gone once drawn, so it cannot be opened as a document
  await watched(page);
  await page.reload();
  const svgRow = page.locator(`tr[data-artifact="${art('pic.svg').id}"]`);
  await svgRow.getByRole('button', { name: /Preview/ }).click();
  assert.match(art('pic.svg').content_type, /^image\/svg/);
  const img = page.locator('tr.preview-row img.preview-img').first();
  await img.waitFor();
  await poll(() => img.evaluate((i) => i.complete && i.naturalWidth > 0), 'the SVG preview to draw', 5000);
  const blobOpen = await img.evaluate((i) => new Promise((res) => {
    const again = new Image();
    again.onload = () => res('readable');
    again.onerror = () => res('revoked');
    again.src = i.src;
  }));
  assert.equal(blobOpen, 'revoked');
  await noMarkupRan(page, 'the SVG preview');

  // a right-to-left override in a file name: marked on the page, and not
  // in the name the file is saved under
  // a right-to-left override in a file name: the service keeps no such
  // artifact (the run says why, the name escaped), and the console's
  // download names would lose it anyway
  assert.ok(!done.artifacts.some((a) => a.path.includes('invoice')), JSON.stringify(done.artifacts));
  const skipped = (done.skipped || []).find((x) => x.path.includes('invoice'));
  assert.ok(skipped, JSON.stringify(done.skipped));
  const note = await page.getByText(/^Not kept: /).innerText();
  assert.ok(note.includes('invoice\\xe2\\x80\\xaefdp.exe') && !note.includes('\u202e'), note);
  const saved = await page.evaluate(async () => (await import('/assets/parts.js')).downloadName({ path: 'out/invoice\u202efdp.exe' }));
  assert.equal(saved, 'invoice_fdp.exe');
  await context.close();
});

test('the sign-in token never leaves the page, and a signed-in person is asked before a link switches them', async () => {
  const link = newLink('admin');
  const token = link.split('#token=')[1];
  const { context, page } = await fresh(browser);
  const leaks = [];
  page.on('request', (r) => {
    const where = r.url() + JSON.stringify(r.headers());
    if (where.includes(token)) leaks.push(r.url());
    const body = r.postData() || '';
    if (body.includes(token) && !(r.method() === 'POST' && new URL(r.url()).pathname === '/v1/session')) leaks.push(`body of ${r.url()}`);
  });
  await page.goto(link);
  await page.waitForURL(/\/#\/activity$/);
  await page.goBack();
  assert.ok(!page.url().includes(token), `the token is in the history: ${page.url()}`);
  assert.deepEqual(leaks, []);

  // signed in as the admin, a link made for another person (here the
  // member's; an attacker's would be their own) asks first
  const who = async () => (await (await page.request.get(`${BASE()}/v1/session`)).json()).person.id;
  const admin = await who();
  const other = newLink('member');
  await page.goto(other);
  const asked = page.getByRole('heading', { name: 'You are already signed in' });
  await asked.waitFor();
  await check(page, 'attack-second-link', asked);
  assert.equal(await who(), admin);
  await page.getByRole('button', { name: /^Stay signed in as / }).click();
  await page.waitForURL(/\/#\/activity$/);
  assert.equal(await who(), admin);
  // the link was not spent: asked again, and taken on purpose, it signs in
  await page.goto(other);
  await page.getByRole('button', { name: 'Sign in with this link' }).click();
  await page.waitForURL(/\/#\/activity$/);
  assert.notEqual(await who(), admin);
  await context.close();
});

test('the console cannot be framed by another site (control: a page without its headers can)', async () => {
  const { context, page } = await fresh(browser);
  // another origin on this machine (nothing leaves it: both are answered by the browser's router)
  const evil = BASE().replace('127.0.0.1', 'localhost') + '/evil.html';
  await page.route(`${BASE()}/control-frame`, (r) => r.fulfill({ status: 200, contentType: 'text/html', body: '<p id="framed">framed</p>' }));
  await page.route(evil, (r) => r.fulfill({ status: 200, contentType: 'text/html',
    body: `<iframe name="control" src="${BASE()}/control-frame"></iframe><iframe name="console" src="${BASE()}/login"></iframe>` }));
  await page.goto(evil);
  const frame = (name) => page.frames().find((f) => f.name() === name);
  await poll(async () => frame('control') && frame('control').evaluate(() => !!document.getElementById('framed')).catch(() => false),
    'the control page to show in its frame', 5000);
  await page.waitForTimeout(1000);
  const shown = await frame('console').evaluate(() => !!document.getElementById('app')).catch(() => false);
  assert.equal(shown, false, 'the console was shown in another site\'s frame');
  await context.close();
});

test('an API answering an HTML error page, or a crafted address, shows words, not markup', async () => {
  const { context, page } = await signInAs(browser, 'admin');
  await watched(page);
  await page.route(/\/v1\/runs\?/, (r) => r.fulfill({ status: 502, contentType: 'text/html',
    body: `<html><body><h1 id="proxy">Bad gateway</h1>${XSS()}</body></html>` }));
  await page.reload();
  await page.getByText(/502/).first().waitFor();
  assert.equal(await page.locator('#proxy').count(), 0);
  await noMarkupRan(page, 'Activity behind a broken proxy');
  await page.unroute(/\/v1\/runs\?/);
  // a malformed escape in the address is no page, not a crash
  page.errors.length = 0;
  await page.goto(`${BASE()}/#/runs/%E0%A4%A`);
  await page.getByRole('heading', { name: 'No such page' }).waitFor();
  assert.deepEqual(page.errors, []);
  await context.close();
});
