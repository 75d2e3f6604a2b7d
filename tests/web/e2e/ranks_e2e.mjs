// The Ranks view in real headless Chromium: `memsnap serve DIR` on a simulated job's folder.
// The table lists every rank, sorts by a column, filters to the ranks that stand out, draws
// every rank's memory on one scale, names the rank that ran out of memory, opens a rank on
// demand, and compares an outlier with the median rank. Screenshots go to SCREENSHOT_DIR.
//
// node ranks_e2e.mjs MEMSNAP_BINARY NODE_MODULES_DIR SCREENSHOT_DIR JOB_DIR RANKS OOM_RANK OUTLIER_RANK
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { launchChromium, runChecked, startServer, steps } from './e2e_support.mjs';

const [binary, nodeModules, screenshots, jobDir, rankCount, oomRank, outlierRank] = process.argv.slice(2);
if (!outlierRank) {
  console.error('usage: node ranks_e2e.mjs MEMSNAP NODE_MODULES SCREENSHOT_DIR JOB_DIR RANKS OOM_RANK OUTLIER_RANK');
  process.exit(2);
}
mkdirSync(screenshots, { recursive: true });

const problems = [];
const { step, current } = steps();
const { server, url } = await startServer(binary, ['--max-snapshots', '3', jobDir], 60000);
const browser = await launchChromium(nodeModules);
await runChecked({ browser, server, problems, current }, async () => {
  const page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
  page.on('pageerror', error => problems.push(`${current()}: page error: ${error.message}`));
  page.on('console', message => { if (message.type() === 'error') problems.push(`${current()}: console: ${message.text()}`); });
  const shot = name => page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: false });
  const rows = page.locator('table.ranks tbody tr:not([hidden])');

  await step('a job folder opens on the Ranks view with every rank', async () => {
    await page.goto(url);
    await page.waitForSelector('table.ranks tbody tr');
    await page.waitForSelector('.tabs button[data-view="ranks"][aria-selected="true"]');
    assert.equal(await rows.count(), Number(rankCount));
    assert.equal(await page.locator('table.ranks svg.spark').count(), Number(rankCount));
    assert.equal(await page.locator('.chip').count(), 0, 'no rank is loaded before it is asked for');
    assert.match(await page.locator('.oom-headline').innerText(), new RegExp(`rank ${oomRank} ran out of memory`));
    assert.match(await page.locator('.outliers').innerText(), new RegExp(`rank ${outlierRank} reserves \\d+% more`));
    assert.match(await page.locator('.outliers').innerText(), /keep_for_metrics/);
    await shot('ranks');
  });

  await step('sorting by peak reserved puts the largest first, again flips it', async () => {
    const header = page.locator('th[data-sort="peak_reserved_bytes"]');
    await header.click();
    await page.waitForSelector('th[data-sort="peak_reserved_bytes"][aria-sort="descending"]');
    const first = await rows.first().locator('td').first().innerText();
    assert.ok([oomRank, outlierRank].includes(first), `largest first, got rank ${first}`);
    await header.click();
    await page.waitForSelector('th[data-sort="peak_reserved_bytes"][aria-sort="ascending"]');
    assert.ok(![oomRank, outlierRank].includes(await rows.first().locator('td').first().innerText()));
  });

  await step('the filter keeps the ranks that ran out of memory or stand out', async () => {
    await page.check('input.notable');
    const shown = await rows.locator('td:first-child').allInnerTexts();
    assert.ok(shown.includes(oomRank) && shown.includes(outlierRank), shown.join(','));
    assert.ok(shown.length < Number(rankCount));
    await shot('ranks-notable');
    await page.uncheck('input.notable');
    assert.equal(await rows.count(), Number(rankCount));
  });

  await step('a rank opens on demand, in its timeline', async () => {
    await rows.filter({ has: page.locator(`td:first-child:text-is("${oomRank}")`) }).first().locator('td').nth(1).click();
    await page.waitForSelector('.tabs button[data-view="timeline"][aria-selected="true"]');
    await page.waitForSelector('.plot canvas');
    assert.match(await page.locator('.chip[aria-checked="true"]').innerText(), new RegExp(`rank ${oomRank}`));
    assert.equal(await page.locator('.tabs button[data-view="oom"]').isHidden(), false);
    await shot('ranks-opened');
  });

  await step('vs median opens Compare with the median rank before', async () => {
    await page.click('.tabs button[data-view="ranks"]');
    await page.waitForSelector('table.ranks tbody tr');
    await page.locator(`.outlier-box:has-text("rank ${outlierRank} reserves") button[data-compare]`).click();
    await page.waitForSelector('.tabs button[data-view="compare"][aria-selected="true"]');
    await page.waitForSelector('.compare-summary, .cards .card');
    const before = await page.locator('select.before option:checked').innerText();
    const after = await page.locator('select.after option:checked').innerText();
    assert.match(after, new RegExp(`rank ${outlierRank} `));
    assert.doesNotMatch(before, new RegExp(`rank ${outlierRank} `));
    assert.match(await page.locator('.cards').innerText(), /reserved/);
    await shot('ranks-compare');
  });

  await step('opening more ranks than the store holds closes the oldest', async () => {
    for (const row of [0, 1, 2, 3]) {
      await page.click('.tabs button[data-view="ranks"]');
      await page.waitForSelector('table.ranks tbody tr');
      await page.locator(`table.ranks tbody tr[data-row="${row}"] td`).nth(1).click();
      await page.waitForSelector('.tabs button[data-view="timeline"][aria-selected="true"]');
    }
    assert.ok(await page.locator('.chip').count() <= 3);
  });
});
