// The Ranks view with a big job, in headless Chromium: time from page load to every rank's row
// drawn, a re-sort by peak reserved measured in the page (to the next frame), the page's JS heap,
// and opening one rank's timeline.
//   node bench/ranks_view_bench.mjs MEMSNAP NODE_MODULES JOB_DIR [PORT]
// (JOB_DIR from bench/ranks_bench.sh; NODE_MODULES: build/e2e-node/node_modules)
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

const [memsnap, nodeModules, job, port = '18790'] = process.argv.slice(2);
if (!job) {
  console.error('usage: node bench/ranks_view_bench.mjs MEMSNAP NODE_MODULES JOB_DIR [PORT]');
  process.exit(2);
}
const { chromium } = createRequire(path.join(path.resolve(nodeModules), 'x.js'))('playwright-core');
const started = Date.now();
const server = spawn(memsnap, ['serve', '--port', port, job], { stdio: ['ignore', 'pipe', 'ignore'] });
await new Promise(resolve => server.stdout.on('data', d => { if (/http/.test(d)) resolve(); }));
console.log(`server ready (ranks summarized): ${Date.now() - started} ms`);
const browser = await chromium.launch({
  executablePath: process.env.MEMSNAP_CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
  let t = Date.now();
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForSelector('table.ranks tbody tr');
  const rows = await page.locator('table.ranks tbody tr').count();
  console.log(`${rows} rows drawn: ${Date.now() - t} ms after navigation`);
  const sort = await page.evaluate(() => new Promise(resolve => {
    const t0 = performance.now();
    document.querySelector('th[data-sort="peak_reserved_bytes"]').click();
    requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - t0), 0));
  }));
  console.log(`re-sorted by peak reserved: ${sort.toFixed(0)} ms`);
  const heap = await page.evaluate(() => (performance.memory ? performance.memory.usedJSHeapSize : 0));
  console.log(`JS heap: ${(heap / 1048576).toFixed(1)} MiB`);
  t = Date.now();
  await page.locator('table.ranks tbody tr').first().locator('td').nth(1).click();
  await page.waitForSelector('.plot canvas');
  console.log(`a rank opened in its timeline: ${Date.now() - t} ms`);
} finally {
  await browser.close();
  server.kill('SIGINT');
}
