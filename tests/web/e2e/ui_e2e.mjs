// End-to-end test of the web viewer in real headless Chromium: starts `memsnap serve` on a
// free port with the given snapshots, opens every view, hovers, clicks, zooms, filters,
// uploads a file (and a broken one), closes one, and saves a screenshot of each view.
//
// node ui_e2e.mjs MEMSNAP_BINARY NODE_MODULES_DIR SCREENSHOT_DIR UPLOAD_FILE SNAPSHOT...
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { launchChromium, runChecked, startServer, steps } from './e2e_support.mjs';

const [binary, nodeModules, screenshots, uploadFile, ...snapshots] = process.argv.slice(2);
if (!snapshots.length) {
  console.error('usage: node ui_e2e.mjs MEMSNAP NODE_MODULES SCREENSHOT_DIR UPLOAD_FILE SNAPSHOT...');
  process.exit(2);
}
mkdirSync(screenshots, { recursive: true });

const problems = [];
const { step, current } = steps();
const { server, url } = await startServer(binary, snapshots, 30000);
const browser = await launchChromium(nodeModules);
await runChecked({ browser, server, problems, current }, async () => {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', error => problems.push(`${current()}: page error: ${error.message}`));
  // The browser itself logs the broken upload's 422; anything else logged as an error fails.
  page.on('console', message => {
    if (message.type() !== 'error') return;
    if (current().startsWith('a broken upload') && /status of 422/.test(message.text())) return;
    problems.push(`${current()}: console: ${message.text()}`);
  });
  const shot = name => page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: false });
  const tab = view => page.click(`.tabs button[data-view="${view}"]`);
  const tooltip = page.locator('#tooltip');

  await step('page loads with every snapshot listed', async () => {
    await page.goto(url);
    await page.waitForSelector('.chip');
    assert.equal(await page.locator('.chip').count(), snapshots.length);
    assert.equal(await page.locator('.chip[aria-checked="true"]').count(), 1);
    // It opens on the first file given, and these files are no job: no Ranks view.
    assert.equal(await page.locator('.chip[aria-checked="true"] .name').innerText(), path.basename(snapshots[0]));
    assert.ok(await page.locator('.tabs button[data-view="ranks"]').isHidden());
  });

  let statsPeakEntry = null;
  await step('stats view', async () => {
    await tab('stats');
    await page.waitForSelector('.cards .card');
    assert.match(await page.locator('.cards').innerText(), /reserved/);
    // The peak comes first, saying which peak it is, and names its entry as the Timeline does.
    assert.match(await page.locator('.cards .card').first().innerText(), /^peak in use during the trace/);
    statsPeakEntry = Number((await page.locator('.cards a.peak-link').innerText()).replace(/^entry /, '').replace(/,/g, ''));
    assert.ok(Number.isInteger(statsPeakEntry) && statsPeakEntry > 0, 'the stats peak names its entry');
    assert.match(await page.locator('pre.summary').innerText(), /snapshot: \d+ device/);
    assert.match(await page.locator('pre.summary').innerText(), /peaks during the trace/);
    await shot('stats');
    await page.waitForFunction(() => !/Looking for memory/.test(document.querySelector('.growth')?.textContent));
    assert.match(await page.locator('.growth').innerText(), /steps, from the/);
    // transformer_s0: 30 steps compared from step 2, none growing.
    assert.match(await page.locator('.growth-headline').innerText(), /^Nothing grows: .* over steps 2 to 30\.$/);
    await page.click('.tune-button');
    await page.waitForSelector('table.tune-table tbody tr', { timeout: 60000 });
    assert.match(await page.locator('.tune-result').innerText(), /settings replayed over \d+ events/);
    await shot('stats-tune');
  });

  await step('flamegraph: hover, zoom, breadcrumb, search, Escape', async () => {
    await tab('flamegraph');
    const canvas = page.locator('.graph canvas');
    await canvas.waitFor();
    const box = await canvas.boundingBox();
    assert.ok(box.height >= 36, `flamegraph height ${box.height}`);
    await page.mouse.move(box.x + 20, box.y + 18 + 9);
    await tooltip.waitFor({ state: 'visible' });
    assert.match(await tooltip.innerText(), /bytes/);
    await shot('flamegraph-hover');
    await page.mouse.click(box.x + 20, box.y + 18 + 9);
    await page.waitForSelector('.breadcrumb button');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('.breadcrumb button'));
    await page.fill('.flame-search', 'alloc|forward|step');
    assert.match(await page.locator('.flame-match').innerText(), /matched .* of this view/);
    await shot('flamegraph-search');
    await page.selectOption('select.kind', 'segments');
    await page.waitForFunction(() => document.querySelector('.total')?.textContent.includes('nodes'));
    await shot('flamegraph-segments');
  });

  await step('segments: hover a block for its stack', async () => {
    await tab('segments');
    const canvas = page.locator('.scroll-box canvas');
    await canvas.waitFor();
    const box = await canvas.boundingBox();
    await page.mouse.move(box.x + 252, box.y + 10);
    await tooltip.waitFor({ state: 'visible' });
    assert.match(await tooltip.innerText(), /segment/);
    await page.waitForFunction(() => !document.getElementById('tooltip').innerText.includes('…\n') );
    await shot('segments');
    // An allocated block of the PyTorch transformer (Python stacks): the user's line comes first.
    await page.mouse.move(box.x + 256, box.y + 30);
    await page.waitForSelector('#tooltip .frames span.py');
    assert.match(await page.locator('#tooltip .frames span').first().innerText(), /\.py:\d+\)$/);
    await shot('segments-python-headline');
    // A click pins the stack in a panel that stays and scrolls; full paths on demand.
    await page.mouse.click(box.x + 256, box.y + 30);
    await page.waitForSelector('#pinned .frames span.py');
    assert.doesNotMatch(await page.locator('#pinned .frames').first().innerText(), /\//);
    await page.check('#pinned .full-paths');
    await page.waitForFunction(() => document.querySelector('#pinned .frames')?.innerText.includes('/'));
    await shot('segments-pinned');
    await page.click('#pinned .close');
    // Coloured by call site, an allocated block takes the colour the Timeline gives its site.
    const pixel = () => page.evaluate(([x, y]) => {
      const c = document.querySelector('.scroll-box canvas'), r = window.devicePixelRatio || 1;
      return [...c.getContext('2d').getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data].join(',');
    }, [256, 30]);
    const byState = await pixel();
    await page.selectOption('select.colour', 'site');
    await page.waitForFunction(() => /each call site/.test(document.querySelector('.state-legend')?.textContent));
    assert.notEqual(await pixel(), byState, 'an allocated block in its call site\'s colour');
    await shot('segments-by-site');
    await page.selectOption('select.colour', 'state');
    await page.waitForSelector('#pinned', { state: 'hidden' });
    // At event: the segments as they were after an early event, then the final state again.
    const finalCounts = await page.locator('.counts').innerText();
    await page.fill('.at-event-number', '100');
    await page.press('.at-event-number', 'Enter');
    await page.waitForFunction(() => /^after alloc/.test(document.querySelector('.state-summary')?.textContent));
    assert.match(await page.locator('.state-summary').innerText(), /reserved .* allocated /);
    assert.notEqual(await page.locator('.counts').innerText(), finalCounts);
    await page.focus('.at-event');
    await page.keyboard.press('ArrowRight');
    await page.waitForFunction(() => document.querySelector('.at-event-number').value === '101');
    await page.mouse.move(box.x + 256, box.y + 30);
    await tooltip.waitFor({ state: 'visible' });
    await shot('segments-at-event');
    await page.click('.final-state');
    await page.waitForFunction(text => document.querySelector('.counts').textContent === text, finalCounts);
    await page.waitForTimeout(300);  // no late step may land on the final state
    assert.equal(await page.locator('.counts').innerText(), finalCounts);
    assert.match(await page.locator('.state-summary').innerText(), /final state/);
    // Find: frame text across the snapshot, with counts; the matching blocks stand out.
    await page.fill('input.find', 'adam');
    await page.press('input.find', 'Enter');
    await page.waitForFunction(() => /stacks · \d+ live blocks/.test(document.querySelector('.find-result')?.textContent));
    await shot('segments-find');
    await page.fill('input.find', '');
    await page.press('input.find', 'Enter');
    await page.selectOption('select.order', 'size');
  });

  await step('timeline: hover, brush to zoom, reset', async () => {
    await tab('timeline');
    const canvas = page.locator('.plot canvas');
    await canvas.waitFor();
    const box = await canvas.boundingBox();
    const before = await page.locator('.summary').innerText();
    // Numbers shown are trace entries, as Trace and Segments count them.
    assert.match(before, /^[\d,]+ trace entries · /);
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height - 34);
    // The legend names what holds the peak by call site, the most first, each with its bytes.
    const legend = await page.locator('.site-legend .legend span').allInnerTexts();
    assert.ok(legend.length >= 3, legend.join(' | '));
    assert.match(legend[0], /^[\d.]+ (B|KiB|MiB|GiB) \S/);
    const legendBytes = legend.filter(t => !/merged$/.test(t)).map(t => {
      const [, value, unit] = t.match(/^([\d.]+) (B|KiB|MiB|GiB)/);
      return Number(value) * { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[unit];
    });
    assert.deepEqual([...legendBytes].sort((a, b) => b - a), legendBytes, 'the most first');
    await shot('timeline');
    await page.mouse.move(box.x + box.width * 0.3, box.y + 200);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.45, box.y + 210, { steps: 5 });
    await page.mouse.up();
    await page.waitForFunction(text => document.querySelector('.summary')?.innerText !== text && !document.querySelector('.reset').disabled, before);
    await page.locator('.plot canvas').waitFor();
    const zoomed = (await page.locator('.summary').innerText()).match(/^entries (\d+)–(\d+) of (\d+) · /);
    assert.ok(zoomed && Number(zoomed[1]) < Number(zoomed[2]) && Number(zoomed[2]) < Number(zoomed[3]),
      await page.locator('.summary').innerText());
    await shot('timeline-zoomed');
    await page.click('.reset');
    await page.waitForFunction(() => document.querySelector('.reset').disabled);
    // More detail: more allocations drawn on their own.
    assert.match(await page.locator('.summary').innerText(), /· 500 drawn on their own/);
    await page.selectOption('select.detail', '2000');
    await page.waitForFunction(() => Number(document.querySelector('.summary')?.textContent.match(/· (\d+) drawn on their own/)?.[1]) > 500);
    await shot('timeline-detail');
    await page.selectOption('select.kind', 'segments');
    await page.waitForFunction(() => /segments and mappings/.test(document.querySelector('.summary')?.textContent));
    await shot('timeline-segments');
    await page.selectOption('select.kind', 'roles');
    await page.waitForFunction(() => /activations/.test(document.querySelector('.role-legend')?.textContent));
    await page.mouse.move(box.x + box.width * 0.5, box.y + 200);
    await tooltip.waitFor({ state: 'visible' });
    assert.match(await tooltip.innerText(), /^After trace entry \d+\n/);
    assert.match(await tooltip.innerText(), /parameters .*\n.*optimizer state/s);
    await shot('timeline-roles');
    await page.selectOption('select.kind', 'active');
  });

  // One numbering: the timeline names its peak by the trace entry, and the link opens the
  // segments right after that entry, where the state API counts the same way.
  await step('timeline: the peak links to the segments at its trace entry', async () => {
    await tab('timeline');
    const link = page.locator('.summary a.peak-link');
    await link.waitFor();
    const entry = Number((await link.innerText()).replace(/^trace entry /, ''));
    assert.ok(Number.isInteger(entry) && entry > 0, await link.innerText());
    assert.equal(entry, statsPeakEntry, 'Stats and Timeline name the same peak entry');
    await link.click();
    await page.waitForSelector('.tabs button[data-view="segments"][aria-selected="true"]');
    await page.waitForFunction(n => document.querySelector('.at-event-number')?.value === String(n), entry);
    await page.waitForFunction(() => /^after (alloc|free_completed)/.test(document.querySelector('.state-summary')?.textContent));
    assert.match(page.url(), new RegExp(`#segments/[^/]+/${entry}$`));
    await shot('segments-at-the-peak');
    await tab('timeline');
  });

  await step('trace: page, filter, expand a stack', async () => {
    await tab('trace');
    await page.waitForSelector('table.data tbody tr');
    assert.ok(await page.locator('table.data tbody tr').count() > 0);
    await page.selectOption('select[name="action"]', 'alloc');
    await page.click('form.trace-filters button[type="submit"]');
    await page.waitForFunction(() => [...document.querySelectorAll('table.data tbody tr td:nth-child(4)')].every(td => td.textContent === 'alloc'));
    await page.locator('table.data tbody tr').first().click();
    await page.waitForSelector('tr.stack');
    if (!(await page.locator('.next').isDisabled())) {
      await page.click('.next');
      await page.waitForFunction(() => /^events 101/.test(document.querySelector('.range').textContent));
    }
    await shot('trace');
    await page.fill('input[name="min_size"]', 'lots');
    await page.click('form.trace-filters button[type="submit"]');
    await page.waitForSelector('.rows .message.error');
  });

  await step('compare two snapshots', async () => {
    await tab('compare');
    if (snapshots.length >= 2) {
      await page.waitForSelector('.result .graph canvas');
      assert.match(await page.locator('.result .cards').innerText(), /reserved/);
      await shot('compare');
    }
  });

  await step('OOM view: why the recorded error happened, offered only where there is one', async () => {
    const oomTab = page.locator('.tabs button[data-view="oom"]');
    assert.ok(await oomTab.isHidden(), 'an OOM tab for a snapshot without an out-of-memory error');
    const withOom = page.locator('.chip', { hasText: 'frag_oom' });
    if (await withOom.count() === 0) return;  // not among the snapshots given
    await withOom.click();
    await oomTab.waitFor({ state: 'visible' });
    await oomTab.click();
    await page.waitForSelector('.oom-headline', { timeout: 60000 });
    assert.match(await page.locator('.oom-headline').innerText(), /Fragmentation/);
    assert.match(await page.locator('.oom-reasons').innerText(), /largest/);
    assert.match(await page.locator('table.oom-settings').innerText(), /expandable_segments:True\s+✓ avoids/);
    // The settings verdict is memsnap tune's, word for word.
    assert.match(await page.locator('.oom-settings-conclusion').innerText(),
      /^Use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: peak reserved 960\.00 MiB/);
    assert.equal(await page.locator('.oom-bar .part').count(), 2, 'live and cached usable; the capped device free bytes not drawn');
    assert.match(await page.locator('main').innerText(), /Not drawn: the device's 77.73 GiB/);
    await shot('oom');
    await page.locator('.chip', { hasText: 'mlp_train' }).click();
    await page.waitForSelector('.empty');  // the view stays, and says there is nothing to explain
    assert.match(await page.locator('.empty').innerText(), /no out-of-memory error/);
    await tab('stats');
    await oomTab.waitFor({ state: 'hidden' });
  });

  await step('the whole device in Stats: only for snapshots with the driver\'s figures', async () => {
    const whole = page.locator('.chip', { hasText: 'whole_device' });
    if (await whole.count() === 0) return;  // not among the snapshots given
    await page.locator('.chip', { hasText: 'mlp_train' }).click();  // PyTorch's pickle: no figures
    await tab('stats');
    await page.waitForSelector('.cards .card');
    assert.equal(await page.locator('table.device-memory').count(), 0, 'a whole-device table without figures');
    await whole.click();
    await page.waitForSelector('table.device-memory');
    const table = await page.locator('table.device-memory').innerText();
    // memsnap.torch on an H200 beside 1 GiB from CuPy (tests/data/memsnap-h200/README.md).
    assert.match(table, /allocated \(live\)\s+2\.09 GiB/);
    assert.match(table, /this process outside the allocator \(CUDA context, other libraries\)\s+1\.57 GiB/);
    assert.match(table, /free\s+136\.0 GiB/);
    assert.ok(await page.locator('.device-memory-bar .part').count() >= 4, 'a part per row');
    assert.match(await page.locator('.growth').innerText(), /no trace/);  // not asked of the server
    await shot('stats-whole-device');
  });

  await step('memory outside the allocator: libraries, the context, pinned host memory, an OOM they caused', async () => {
    const stepChip = page.locator('.chip', { hasText: 'nccl_cudnn_step' });
    if (await stepChip.count() === 0) return;  // not among the snapshots given
    await stepChip.click();
    await tab('stats');
    await page.waitForSelector('table.device-memory');
    const table = await page.locator('table.device-memory').innerText();
    // NCCL, cuDNN and a pinned DataLoader on an H200 (tests/data/memsnap-h200/README.md).
    assert.match(table, /libnccl\.so\.2 \(outside the allocator\)\s+388\.0 MiB/);
    assert.match(table, /libcublas\.so\.13 \(outside the allocator\)\s+128\.3 MiB/);
    assert.match(table, /CUDA context and unaccounted \(no recorded call made it\)\s+815\.7 MiB/);
    assert.doesNotMatch(table, /this process outside the allocator/, 'split into libraries and the context');
    const outside = await page.locator('table.outside-memory').innerText();
    assert.match(outside, /pinned host\s+libtorch_cuda\.so\s+2\.00 MiB\s+2/);
    await shot('stats-outside-memory');
    // The timeline's whole device: the allocator and each library over the step, the context
    // from the snapshot's driver figures.
    await tab('timeline');
    await page.waitForSelector('.plot canvas');
    await page.selectOption('select.kind', 'device');
    await page.waitForFunction(() => /libnccl\.so\.2/.test(document.querySelector('.role-legend')?.textContent));
    assert.match(await page.locator('.role-legend').innerText(), /active \(allocator\)[\s\S]*libnccl\.so\.2[\s\S]*libcublas\.so\.13/);
    assert.match(await page.locator('.site-legend').innerText(), /At the snapshot only[\s\S]*815\.7 MiB CUDA context/);
    assert.match(await page.locator('.summary').innerText(), /the allocator and other libraries together peaked at/);
    const plot = await page.locator('.plot canvas').boundingBox();
    await page.mouse.move(plot.x + plot.width - 16, plot.y + plot.height / 2);
    await tooltip.waitFor({ state: 'visible' });
    assert.match(await tooltip.innerText(), /libnccl\.so\.2\s+388\.0 MiB/);
    await shot('timeline-whole-device');
    await page.mouse.move(plot.x + 5, plot.y + plot.height + 50);
    await page.selectOption('select.kind', 'active');
    const oomChip = page.locator('.chip', { hasText: 'library_oom' });
    await oomChip.click();
    const oomTab = page.locator('.tabs button[data-view="oom"]');
    await oomTab.waitFor({ state: 'visible' });
    await oomTab.click();
    await page.waitForSelector('.oom-headline', { timeout: 60000 });
    assert.match(await page.locator('.oom-headline').innerText(), /Other libraries of this process held the memory/);
    assert.match(await page.locator('.oom-reasons').innerText(), /greedy_library\.py:3/);
    assert.match(await page.locator('table.oom-memory').innerText(), /cupy_backends\/cuda\/api\/runtime.*\s+137\.0 GiB/);
    await shot('oom-other-libraries');
    await tab('stats');
  });

  await step('the process before the allocator\'s first segment: its CUDA context as created', async () => {
    const chip = page.locator('.chip', { hasText: 'nccl_cudnn_teardown_first_segment' });
    if (await chip.count() === 0) return;  // not among the snapshots given
    await chip.click();
    await tab('stats');
    await page.waitForSelector('table.device-memory');
    // The same step's process after its teardown, on an H200 (tests/data/memsnap-h200/README.md).
    const said = await page.locator('.device-memory ~ p.hint').first().innerText();
    assert.match(said, /Before the allocator first asked the device for memory, this process held 530\.0 MiB there: its CUDA context as created/);
    assert.match(said, /The CUDA context and unaccounted memory is 815\.7 MiB now/);
    await shot('stats-before-first-segment');
  });

  await step('private pools: named in stats, segments by pool, the OOM they caused', async () => {
    const withPools = page.locator('.chip', { hasText: 'pool_oom' });
    if (await withPools.count() === 0) return;  // not among the snapshots given
    await withPools.click();
    await tab('stats');
    await page.waitForSelector('table.pools');
    const pools = await page.locator('table.pools').innerText();
    assert.match(pools, /global/);
    assert.match(pools, /CUDA graph pool 1\s+2\s+512\.0 MiB/);
    assert.match(pools, /CUDA graph pool 2/);
    await shot('stats-pools');
    await tab('segments');
    await page.waitForSelector('select.pool');
    assert.equal(await page.locator('select.order').inputValue(), 'pool');
    await page.selectOption('select.pool', '2,0');
    const canvas = page.locator('.scroll-box canvas');
    const box = await canvas.boundingBox();
    await page.mouse.move(box.x + 252, box.y + 10);
    await tooltip.waitFor({ state: 'visible' });
    assert.match(await tooltip.innerText(), /CUDA graph pool 2/);
    await shot('segments-pool');
    await page.mouse.move(box.x + 5, box.y + box.height + 50);
    await page.selectOption('select.pool', '');
    await tab('timeline');
    await page.waitForSelector('.plot canvas');
    await page.selectOption('select.kind', 'pools');
    await page.waitForFunction(() => /CUDA graph pool 2/.test(document.querySelector('.role-legend')?.textContent));
    assert.match(await page.locator('.role-legend').innerText(), /global[\s\S]*CUDA graph pool 1/);
    await shot('timeline-pools');
    await page.selectOption('select.kind', 'active');
    await tab('oom');
    await page.waitForSelector('.oom-headline', { timeout: 60000 });
    assert.match(await page.locator('.oom-headline').innerText(), /Private pools/);
    assert.match(await page.locator('.oom-reasons').innerText(), /pool=g1\.pool\(\)/);
    // The replays' cap is said, and the conclusion offers the shared pool, not less live memory.
    assert.match(await page.locator('main').innerText(), /simulated device of 1\.25 GiB: the lowest the memory cap can have been/);
    const conclusion = await page.locator('.oom-settings-conclusion').innerText();
    assert.match(await page.locator('main').innerText(), /898\.00 MiB is reserved before the request instead of 1\.25 GiB/);
    assert.doesNotMatch(conclusion, /needs less/);
    assert.match(conclusion, /^Cannot judge which settings reserve least, because no setting tried avoids/);
    await shot('oom-pools');
    await page.locator('.chip', { hasText: 'mlp_train' }).click();
    await tab('stats');
  });

  await step('stacks: the Python line first, dispatcher folded, All frames unfolds', async () => {
    const withCpp = page.locator('.chip', { hasText: 'oom_all_stacks' });
    if (await withCpp.count() === 0) return;  // not among the snapshots given
    await withCpp.click();
    await tab('trace');
    await page.waitForSelector('table.data tbody tr');
    await page.selectOption('select[name="action"]', 'alloc');
    await page.click('form.trace-filters button[type="submit"]');
    await page.waitForFunction(() => [...document.querySelectorAll('table.data tbody tr td:nth-child(4)')].every(td => td.textContent === 'alloc'));
    const firstRow = page.locator('table.data tbody tr').first();
    assert.match(await firstRow.innerText(), /\.py:\d+/, 'the one-line frame is the user\'s Python line');
    await firstRow.click();
    await page.waitForSelector('tr.stack .py');
    const folded = await page.locator('tr.stack').innerText();
    assert.match(folded, /empty_memory_format \[dispatcher\]/);
    assert.doesNotMatch(folded, /wrap_kernel_functor_unboxed_|unwind::unwind|_PyEval_EvalFrameDefault|\(c10::ArrayRef/);
    await shot('stack-folded');
    await page.check('#all-frames');
    await page.waitForSelector('table.data tbody tr');
    await page.locator('table.data tbody tr').first().click();
    await page.waitForSelector('tr.stack .cpp');
    const all = await page.locator('tr.stack').innerText();
    assert.match(all, /torch::unwind::unwind\(\)/);
    assert.match(all, /c10::impl::wrap_kernel_functor_unboxed_</);
    await shot('stack-all-frames');
    await page.uncheck('#all-frames');
    await page.locator('.chip').first().click();
  });

  await step('keyboard: number keys switch views, arrows move between tabs', async () => {
    await page.locator('body').click({ position: { x: 5, y: 5 } });
    await page.keyboard.press('2');
    await page.waitForSelector('.tabs button[data-view="flamegraph"][aria-selected="true"]');
    await page.focus('.tabs button[data-view="flamegraph"]');
    await page.keyboard.press('ArrowRight');
    await page.waitForSelector('.tabs button[data-view="segments"][aria-selected="true"]');
  });

  await step('upload a snapshot through the file picker; its view is asked for before the list', async () => {
    const asked = [];
    const note = request => asked.push(`${request.method()} ${new URL(request.url()).pathname}`);
    page.on('request', note);
    const viewAsked = page.waitForRequest(request => /^\/api\/snapshots\/\d+\/segments$/.test(new URL(request.url()).pathname));
    await page.setInputFiles('#file-input', uploadFile);
    await page.waitForFunction(n => document.querySelectorAll('.chip').length === n, snapshots.length + 1);
    await viewAsked;
    page.off('request', note);
    // The upload's answer is the new snapshot's summary: the page shows it without reading
    // the list first (it reads the list again meanwhile).
    const posted = asked.indexOf('POST /api/snapshots');
    const view = asked.findIndex(a => /^GET \/api\/snapshots\/\d+\/segments$/.test(a));
    const list = asked.indexOf('GET /api/snapshots', posted);
    assert.ok(posted >= 0 && view > posted && (list < 0 || view < list), `requests after the upload: ${asked.join(', ')}`);
    assert.match(await page.locator('.chip[aria-checked="true"]').innerText(), new RegExp(path.basename(uploadFile).replace('.', '\\.')));
    await tab('stats');
    await page.waitForSelector('.cards .card');
    await shot('uploaded');
  });

  await step('a broken upload is refused with a message', async () => {
    const broken = path.join(screenshots, 'broken.pickle');
    writeFileSync(broken, 'this is not a snapshot');
    await page.setInputFiles('#file-input', broken);
    await page.waitForSelector('#message.error');
    assert.match(await page.locator('#message').innerText(), /not a snapshot/);
    assert.equal(await page.locator('.chip').count(), snapshots.length + 1);
  });

  await step('close a snapshot', async () => {
    await page.locator('.chip .close').last().click();
    await page.waitForFunction(n => document.querySelectorAll('.chip').length === n, snapshots.length);
  });

  await step('the address bar keeps the view, whose data is asked for once, with the list', async () => {
    const id = await page.locator('.chip').first().getAttribute('data-id');
    await page.goto(`${url}#timeline/${id}`);
    await page.waitForSelector('.tabs button[data-view="timeline"][aria-selected="true"]');
    await page.waitForSelector('.plot canvas');
    const asked = [];
    const note = request => { if (new URL(request.url()).pathname.startsWith('/api/')) asked.push(new URL(request.url()).pathname); };
    page.on('request', note);
    await page.reload();
    await page.waitForSelector('.tabs button[data-view="timeline"][aria-selected="true"]');
    await page.waitForSelector('.plot canvas');
    page.off('request', note);
    const timeline = `/api/snapshots/${id}/timeline`;
    // Asked ahead, before the list of snapshots it would otherwise wait for, and not again.
    assert.equal(asked.filter(p => p === timeline).length, 1, asked.join(' '));
    assert.ok(asked.indexOf(timeline) < asked.indexOf('/api/snapshots'), asked.join(' '));
  });
});
