// The browser harness of the console's tests (tests/e2e/console*.test.mjs):
// Debian's Chromium driven by playwright-core, against the real `airlock
// serve` that tests/integration/test_console.py started, with the people
// and login links it made (handed over in the environment). Each test
// takes a fresh context (an empty profile: no cookie, no storage), signs
// in with a login link as a person does, and checks each page it shows:
// screenshots at 1280x800 and 390x844 and axe-core's audit, in which no
// violation may be serious or critical.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import AxeBuilder from '@axe-core/playwright';

export function env(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run these tests through pytest (tests/integration/test_console.py)`);
  return v;
}

export const BASE = () => env('AIRLOCK_URL');
export const WIDE = { width: 1280, height: 800 };
export const NARROW = { width: 390, height: 844 };

const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run'];

export async function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ARGS });
}

// A fresh context (an empty profile) whose page reports what the console
// logs as an error and every uncaught exception, so a broken page fails
// its test rather than only looking empty.
export async function fresh(browser, { viewport = WIDE, headers } = {}) {
  const context = await browser.newContext({ viewport, extraHTTPHeaders: headers, acceptDownloads: true });
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(`uncaught: ${e.message}`));
  // (a refused request is logged by Chromium itself: the page shows the API's words, which the tests read)
  page.on('console', (m) => { if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) page.errors.push(`console: ${m.text()}`); });
  return { context, page };
}

// Signs in with LINK (BASE/login#token=...) in a fresh context: the page
// redeems it and lands on Activity. Returns { context, page }.
export async function signIn(browser, link, opts = {}) {
  const { context, page } = await fresh(browser, opts);
  await page.goto(link);
  await page.waitForURL(/\/#\/activity$/, { timeout: 15_000 });
  await page.getByRole('heading', { name: 'Activity', level: 1 }).waitFor();
  return { context, page };
}

// The person's next unused login link: test_console.py made several per
// person with the real `airlock admin login-link` (AIRLOCK_LINKS_<WHO>,
// space-separated); each is used once.
const used = new Map();
export function newLink(who) {
  const links = env(`AIRLOCK_LINKS_${who.toUpperCase()}`).split(' ');
  const i = used.get(who) || 0;
  assert.ok(i < links.length, `test_console.py made only ${links.length} links for ${who}`);
  used.set(who, i + 1);
  return links[i];
}

// WHO (admin, approver, member, other) signed in with their next link, in
// a fresh context.
export async function signInAs(browser, who, opts = {}) {
  return signIn(browser, newLink(who), opts);
}

// A request from the page itself (its cookie; with the CSRF token unless
// CSRF is false): { status, doc }.
export async function pageFetch(page, method, path, body, { csrf = true } = {}) {
  return page.evaluate(async ({ method, path, body, csrf }) => {
    const headers = { 'Content-Type': 'application/json' };
    if (csrf) {
      const s = await (await fetch('/v1/session')).json();
      headers['X-CSRF-Token'] = s.csrf_token;
    }
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    let doc = text;
    try { doc = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, doc };
  }, { method, path, body, csrf });
}

// A person's API key (for what an agent does beside the browser).
export function key(who) { return env(`AIRLOCK_KEY_${who.toUpperCase()}`); }

export async function apiCall(who, method, path, body) {
  const r = await fetch(BASE() + path, {
    method,
    headers: { Authorization: `Bearer ${key(who)}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let doc = null;
  try { doc = JSON.parse(text); } catch { doc = text; }
  return { status: r.status, doc };
}

// axe-core on the page as it is now: no serious or critical violation.
export async function axe(page, what) {
  const result = await new AxeBuilder({ page }).analyze();
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad.map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join('; ')})`), [],
    `axe-core on ${what}`);
}

// NAME's screenshots at both sizes under build/console-screenshots/, and
// axe-core at each (the narrow layout has its own menu button and
// tables). READY, when given, is awaited after each resize (a locator
// that shows the page has drawn).
export async function check(page, name, ready) {
  const dir = env('AIRLOCK_SCREENSHOTS');
  mkdirSync(dir, { recursive: true });
  const was = page.viewportSize();
  for (const [size, vp] of [['1280', WIDE], ['390', NARROW]]) {
    await page.setViewportSize(vp);
    if (ready) await ready.first().waitFor();
    await page.evaluate(() => document.fonts && document.fonts.ready);
    await page.screenshot({ path: join(dir, `${name}-${size}.png`), fullPage: true });
    await axe(page, `${name} at ${size} px`);
  }
  await page.setViewportSize(was);
  assert.deepEqual(page.errors, [], `the page logged errors on ${name}`);
}

export async function poll(fn, what, timeout = 30_000) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}
