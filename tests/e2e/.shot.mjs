import { launch, fresh, WIDE, NARROW } from '/work/wt-web/tests/e2e/console_util.mjs';
const [link, ...routes] = process.argv.slice(2);
const browser = await launch();
const { context, page } = await fresh(browser);
await page.goto(link);
await page.waitForURL(/#\/activity/);
await page.waitForTimeout(800);
for (const r of routes.length ? routes : ['#/activity']) {
  await page.goto('http://127.0.0.1:18931/' + r);
  await page.waitForTimeout(1200);
  const name = r.replace(/[^a-z0-9]+/gi, '_');
  await page.setViewportSize(WIDE); await page.screenshot({ path: `/tmp/wtweb-${name}-1280.png` });
  await page.setViewportSize(NARROW); await page.screenshot({ path: `/tmp/wtweb-${name}-390.png` });
  await page.setViewportSize(WIDE);
}
console.log(page.errors);
await browser.close();
