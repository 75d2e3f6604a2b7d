// Every string a snapshot carries is data: snapshots whose every free-text field (frame files
// and functions, annotation names, the device's and the host's names, the source, the file's
// own name) holds HTML are opened in real headless Chromium, and every view is visited,
// hovered over a grid of points and clicked; no element from the snapshot's text may appear in
// the page, and the text must still be shown (escaped, not dropped).
//
// node hostile_strings_e2e.mjs MEMSNAP NODE_MODULES SCREENSHOT_DIR JOB_RANK0 JOB_RANK1 OOM_SNAPSHOT
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { launchChromium, runChecked, startServer, steps } from './e2e_support.mjs';

const [binary, nodeModules, screenshots, ...sources] = process.argv.slice(2);
if (sources.length !== 3) {
  console.error('usage: node hostile_strings_e2e.mjs MEMSNAP NODE_MODULES SCREENSHOT_DIR RANK0 RANK1 OOM_SNAPSHOT');
  process.exit(2);
}
mkdirSync(screenshots, { recursive: true });

// Markup that becomes an element with data-pwned if any view puts it into the page as HTML,
// in a text, an attribute (quoted either way) or a tag.
const PAYLOAD = `"'><img src=x data-pwned=1 onerror=alert(1)><svg data-pwned=1 onload=alert(1)></svg>&lt;`;
const hostile = text => `${PAYLOAD}${text}`;

function poison(snapshot) {
  const frames = list => (list || []).forEach(f => { f.filename = hostile(f.filename); f.name = hostile(f.name); });
  for (const trace of snapshot.device_traces || []) for (const event of trace) frames(event.frames);
  for (const segment of snapshot.segments || []) {
    frames(segment.frames);
    for (const block of segment.blocks || []) {
      frames(block.frames);
      for (const entry of block.history || []) frames(entry.frames);
    }
  }
  for (const annotation of snapshot.external_annotations || []) annotation.name = hostile(annotation.name);
  for (const device of snapshot.devices || []) device.name = hostile(device.name);
  if (snapshot.process) snapshot.process.host = hostile(snapshot.process.host);
  snapshot.source = hostile(snapshot.source);
  return snapshot;
}

const folder = mkdtempSync(path.join(os.tmpdir(), 'memsnap-hostile-'));
process.on('exit', () => rmSync(folder, { recursive: true, force: true }));
const files = sources.map((source, i) => {
  const plain = path.join(folder, `plain${i}.json`);
  execFileSync(binary, ['convert', source, plain]);
  // The file's own name is shown too: it carries markup of its own.
  const name = path.join(folder, `<b data-pwned=1>${['rank0', 'rank1', 'oom'][i]}.json`);
  writeFileSync(name, JSON.stringify(poison(JSON.parse(readFileSync(plain, 'utf8')))));
  rmSync(plain);
  return name;
});

const problems = [];
const { step, current } = steps();
const { server, url } = await startServer(binary, files, 30000);
const browser = await launchChromium(nodeModules);
await runChecked({ browser, server, problems, current }, async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', error => problems.push(`${current()}: page error: ${error.message}`));
  page.on('dialog', dialog => { problems.push(`${current()}: a dialog opened: ${dialog.message()}`); dialog.dismiss(); });
  // The payload's <img src=x> would be fetched (and 404) only if it became an element.
  page.on('request', request => {
    if (/\/x$/.test(new URL(request.url()).pathname)) problems.push(`${current()}: the page fetched ${request.url()}`);
  });
  page.on('console', message => {
    if (message.type() === 'error') problems.push(`${current()}: console: ${message.text()}`);
  });

  const noInjectedElement = async where => {
    const injected = await page.evaluate(() => document.querySelectorAll('[data-pwned]').length);
    assert.equal(injected, 0, `${where}: ${injected} element(s) from the snapshot's text in the page`);
  };
  // Hovers a 6 x 5 grid over every canvas and SVG in view, checking the page after each tooltip.
  const hoverEverywhere = async where => {
    for (const selector of ['canvas', 'svg']) {
      for (const handle of await page.locator(`#view ${selector}`).elementHandles()) {
        const box = await handle.boundingBox();
        if (!box || box.width < 20 || box.height < 20) continue;
        for (let x = 1; x <= 6; ++x)
          for (let y = 1; y <= 5; ++y) {
            await page.mouse.move(box.x + (box.width * x) / 7, box.y + Math.min(box.height, 800) * y / 6);
            await noInjectedElement(`${where}, hovering`);
          }
      }
    }
  };
  const visit = async (view, where, ready) => {
    await page.click(`.tabs button[data-view="${view}"]`);
    await page.waitForSelector(ready);
    await page.waitForTimeout(200);
    await noInjectedElement(where);
    await hoverEverywhere(where);
  };

  await step('the snapshot list shows the hostile names as text', async () => {
    await page.goto(url);
    await page.waitForSelector('.chip');
    assert.equal(await page.locator('.chip').count(), 3);
    await noInjectedElement('snapshot list');
    assert.match(await page.locator('.chip .name').first().innerText(), /^<b data-pwned=1>/);
    assert.match(await page.locator('.chip').first().getAttribute('title'), /<img src=x data-pwned=1/);
  });

  for (let chip = 0; chip < 3; ++chip) {
    const name = ['rank0', 'rank1', 'oom'][chip];
    await step(`${name}: stats, flamegraph, segments, timeline and trace`, async () => {
      await page.locator('.chip').nth(chip).click();
      await visit('stats', `${name} stats`, '.cards .card');
      await visit('flamegraph', `${name} flamegraph`, '.graph canvas');
      await visit('segments', `${name} segments`, '.scroll-box canvas');
      await visit('timeline', `${name} timeline`, '.plot canvas');
      await visit('trace', `${name} trace`, 'table.data tbody tr');
      // A row opens its stack: frames with the payload in their names and files.
      const rows = page.locator('table.data tbody tr');
      for (let i = 0; i < Math.min(5, await rows.count()); ++i) {
        await rows.nth(i).click();
        await page.waitForTimeout(100);
        await noInjectedElement(`${name} trace, row ${i} opened`);
      }
      await page.screenshot({ path: path.join(screenshots, `hostile-${name}.png`) });
    });
  }

  await step('out-of-memory explanation', async () => {
    await page.locator('.chip').nth(2).click();
    await visit('oom', 'oom view', '.oom-headline');
    const text = await page.locator('#view').textContent();
    assert.match(text, /<img src=x data-pwned=1/, `the frames are shown as text: ${text.slice(text.indexOf('Requested at'), text.indexOf('Requested at') + 500)}`);
  });

  await step('compare', async () => {
    await page.locator('.chip').nth(0).click();
    await page.click('.tabs button[data-view="compare"]');
    await page.waitForTimeout(300);
    const before = page.locator('#view select.before');
    await before.waitFor();
    await noInjectedElement('compare choices');
    await before.selectOption({ index: 1 });
    await page.waitForTimeout(500);
    await noInjectedElement('compare');
    await hoverEverywhere('compare');
  });

  await step('ranks, when the files make a job', async () => {
    const ranks = page.locator('.tabs button[data-view="ranks"]');
    if (await ranks.isHidden()) return;
    await visit('ranks', 'ranks', 'table.data.ranks tbody tr');
    await page.screenshot({ path: path.join(screenshots, 'hostile-ranks.png') });
  });
});
