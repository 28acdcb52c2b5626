// The web console in a real browser (Debian's Chromium, playwright-core)
// against a real `airlock serve` (tests/integration/test_console.py made
// its people: admin, approver and member of one workspace, and a person of
// another organisation). Every page shown is screenshot at both sizes and
// checked by axe-core (console_util.mjs).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { apiCall, BASE, check, launch, poll, signInAs } from './console_util.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('Activity shows a run requested through the API live, without a reload', async () => {
  const { context, page } = await signInAs(browser, 'member');
  try {
    const tag = `live-${Date.now()}`;
    const { status, doc } = await apiCall('member', 'POST', '/v1/runs',
      { language: 'python', code: 'print("hello from the console test")', description: tag });
    assert.equal(status, 201, JSON.stringify(doc));
    const row = page.locator(`tr[data-run="${doc.id}"]`);
    await row.waitFor({ timeout: 20_000 });
    await assert.doesNotReject(row.getByText(tag).waitFor());
    // and its state follows the run to its end, still without a reload
    await row.getByText('succeeded').waitFor({ timeout: 30_000 });
    await check(page, 'activity', page.locator('tbody tr'));
  } finally {
    await context.close();
  }
});
