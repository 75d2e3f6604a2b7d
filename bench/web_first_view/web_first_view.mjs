// From a snapshot file to its memory timeline painted in headless Chromium: memsnap's page
// against PyTorch's memory_viz page (MemoryViz.js, the page behind pytorch.org/memory_viz and
// `_memory_viz.py trace_plot`), rounds alternating, medians printed with the ratio.
//
//   node web_first_view.mjs MEMSNAP MEMORYVIZ_JS NODE_MODULES ROUNDS SNAPSHOT...   (bench/web_first_view.sh runs it)
//
// What is timed, each in a fresh browser context:
// - memory_viz: navigation to a page that imports MemoryViz.js (d3 v5 from NODE_MODULES, bundled
//   as its CDN serves it, through an import map, so it runs offline) and hands it the file by
//   URL, as its "remote files" do,
//   until its Active Memory Timeline has been painted. Only PyTorch pickles (not gzipped) are
//   given to it: it reads nothing else.
// - memsnap, file on the command line: `memsnap serve FILE` started (the file read and
//   analysed) until the page opened at #timeline has painted its timeline.
// - memsnap, upload: a server started empty beforehand; navigation to its page, the file given
//   to the page's file picker, until the timeline has painted.
// "Painted" is two animation frames after the plot's first element appears in the page.
import { spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';

const [memsnap, memoryVizJs, nodeModules, roundsText, ...snapshots] = process.argv.slice(2);
const rounds = Number(roundsText);
if (!memsnap || !memoryVizJs || !nodeModules || !(rounds > 0) || snapshots.length === 0) {
  console.error('usage: node web_first_view.mjs MEMSNAP MEMORYVIZ_JS NODE_MODULES ROUNDS SNAPSHOT...');
  process.exit(2);
}
const timeoutMs = 180000;
const { chromium } = createRequire(path.join(path.resolve(nodeModules), 'x.js'))('playwright-core');

// Records, on the page's clock (epoch ms), when SELECTOR first matched and two frames later.
function watchForPaint(selector) {
  const observer = new MutationObserver(() => {
    if (!document.querySelector(selector)) return;
    observer.disconnect();
    window.__appeared = performance.timeOrigin + performance.now();
    requestAnimationFrame(() => requestAnimationFrame(() => { window.__painted = performance.timeOrigin + performance.now(); }));
  });
  observer.observe(document, { childList: true, subtree: true });
}

async function paintedAt(page) {
  await page.waitForFunction(() => window.__painted, null, { timeout: timeoutMs, polling: 50 });
  return page.evaluate(() => window.__painted);
}

// memory_viz's page, served by a static server: the page, MemoryViz.js, d3 and the snapshot.
// MemoryViz.js imports d3 v5 and four of its modules from a CDN that serves each as one bundled
// ES module; here esbuild bundles d3 v5 from npm the same way, and the page's import map sends
// all five imports to that bundle (one d3, so d3.event is the one its zoom and brush set).
function memoryVizServer(snapshotBytes) {
  const { buildSync } = createRequire(path.join(path.resolve(nodeModules), 'x.js'))('esbuild');
  const d3 = buildSync({ entryPoints: [path.join(nodeModules, 'd3/index.js')], bundle: true, format: 'esm', minify: true,
                         write: false, logLevel: 'error' }).outputFiles[0].text;
  const imports = Object.fromEntries(['d3@5', 'd3-axis@1', 'd3-scale@1', 'd3-zoom@1', 'd3-brush@1']
    .map(name => [`https://cdn.skypack.dev/${name}`, '/d3.mjs']));
  const page = `<!DOCTYPE html><html><head><script type="importmap">${JSON.stringify({ imports })}</script></head><body>
<script type="module">
import { add_remote_files } from '/MemoryViz.js';
add_remote_files([{ name: 'snapshot.pickle', url: '/snapshot.pickle' }]);
</script></body></html>`;
  const server = createServer((request, response) => {
    const url = new URL(request.url, 'http://localhost');
    const send = (type, body) => { response.writeHead(200, { 'Content-Type': type }); response.end(body); };
    if (url.pathname === '/') return send('text/html', page);
    if (url.pathname === '/MemoryViz.js') return send('text/javascript', readFileSync(memoryVizJs));
    if (url.pathname === '/d3.mjs') return send('text/javascript', d3);
    if (url.pathname === '/snapshot.pickle') return send('application/octet-stream', snapshotBytes);
    if (url.pathname === '/floor') return send('text/html', floorPage);
    response.writeHead(404); response.end();
  });
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// The browser's own share: a page that paints one canvas as soon as it loads.
const floorPage = `<!DOCTYPE html><html><body><script>
const canvas = document.createElement('canvas');
canvas.width = 800; canvas.height = 400;
canvas.getContext('2d').fillRect(0, 0, 100, 100);
document.body.appendChild(canvas);
</script></body></html>`;

async function timeFloor(browser, base) {
  return inContext(browser, async page => {
    await page.addInitScript(watchForPaint, 'canvas');
    const started = Date.now();
    await page.goto(`${base}floor`);
    return (await paintedAt(page)) - started;
  });
}

function startMemsnap(args) {
  const started = Date.now();
  const server = spawn(memsnap, ['serve', '--port', '0', '--max-upload-mb', '2048', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let output = '';
    const take = chunk => {
      output += chunk;
      const match = /http:\/\/[^\s]+\//.exec(output);
      if (match) resolve({ server, url: match[0], started });
    };
    server.stdout.on('data', take);
    server.stderr.on('data', chunk => { output += chunk; });
    server.on('exit', code => reject(new Error(`memsnap serve exited with ${code}: ${output}`)));
  });
}

async function inContext(browser, body) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  try { return await body(await context.newPage()); } finally { await context.close(); }
}

async function timeMemoryViz(browser, base) {
  return inContext(browser, async page => {
    await page.addInitScript(watchForPaint, 'svg polygon');
    const started = Date.now();
    await page.goto(base);
    return (await paintedAt(page)) - started;
  });
}

async function timeMemsnapServe(browser, file) {
  // The browser's page is made first: only the server's start, the file and the page count.
  return inContext(browser, async page => {
    await page.addInitScript(watchForPaint, '.plot canvas');
    const { server, url, started } = await startMemsnap([file]);
    const ready = Date.now();
    try {
      await page.goto(`${url}#timeline/1`);
      const painted = await paintedAt(page);
      return { total: painted - started, ready: ready - started };
    } finally { server.kill('SIGINT'); }
  });
}

async function timeMemsnapUpload(browser, url, file) {
  return inContext(browser, async page => {
    await page.addInitScript(watchForPaint, '.plot canvas');
    const started = Date.now();
    await page.goto(`${url}#timeline`);
    await page.setInputFiles('#file-input', file);
    const painted = await paintedAt(page);
    // Closed again, so that every round uploads into an empty server.
    await page.evaluate(async () => {
      const { snapshots } = await (await fetch('/api/snapshots')).json();
      for (const s of snapshots) await fetch(`/api/snapshots/${s.id}`, { method: 'DELETE' });
    });
    return painted - started;
  });
}

const median = values => { const s = [...values].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const seconds = ms => `${(ms / 1000).toFixed(3)} s`;

const browser = await chromium.launch({
  executablePath: process.env.MEMSNAP_CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const empty = await startMemsnap([]);
try {
  for (const file of snapshots) {
    try { await measure(file); } catch (error) { console.log(`\n${file}: not measured: ${error.message.split('\n')[0]}`); }
  }
} finally {
  await browser.close();
  empty.server.kill('SIGINT');
}

async function measure(file) {
  const bytes = readFileSync(file);
  const isPickle = bytes[0] === 0x80;
  const viz = await memoryVizServer(isPickle ? bytes : Buffer.alloc(0));
  try { await measureWith(file, viz, isPickle); } finally { viz.close(); }
}

async function measureWith(file, viz, isPickle) {
  const times = { viz: [], serve: [], ready: [], upload: [], floor: [] };
  const failures = { viz: null };
  for (let round = 0; round < rounds; ++round) {
    times.floor.push(await timeFloor(browser, `http://127.0.0.1:${viz.address().port}/`));
    if (isPickle && !failures.viz) {
      try { times.viz.push(await timeMemoryViz(browser, `http://127.0.0.1:${viz.address().port}/`)); }
      catch (error) { failures.viz = error.message.split('\n')[0]; }
    }
    const serve = await timeMemsnapServe(browser, file);
    times.serve.push(serve.total);
    times.ready.push(serve.ready);
    times.upload.push(await timeMemsnapUpload(browser, empty.url, file));
    console.log(`round ${round + 1}: memory_viz ${times.viz.at(-1) === undefined || failures.viz ? '-' : seconds(times.viz.at(-1))}, ` +
                `memsnap serve ${seconds(times.serve.at(-1))} (listening after ${seconds(times.ready.at(-1))}), ` +
                `memsnap upload ${seconds(times.upload.at(-1))}`);
  }
  console.log(`\n${path.basename(file)} (${(statSync(file).size / 1048576).toFixed(1)} MiB), medians of ${rounds} rounds, file to painted timeline:`);
  const vizMedian = times.viz.length && !failures.viz ? median(times.viz) : null;
  console.log(`  memory_viz (MemoryViz.js)   ${vizMedian === null ? (isPickle ? `did not paint: ${failures.viz}` : 'cannot read this file') : seconds(vizMedian)}`);
  for (const [name, key] of [['memsnap serve FILE', 'serve'], ['memsnap upload', 'upload']]) {
    const m = median(times[key]);
    const ratio = vizMedian === null ? '' : vizMedian >= m ? `   ${(vizMedian / m).toFixed(1)}x faster` : `   ${(m / vizMedian).toFixed(1)}x slower`;
    console.log(`  ${name.padEnd(27)} ${seconds(m)}${ratio}` +
                `   (range ${seconds(Math.min(...times[key]))} - ${seconds(Math.max(...times[key]))})`);
  }
  console.log(`  (memsnap serve FILE listened ${seconds(median(times.ready))} after it started; a page that only paints ` +
              `a canvas takes ${seconds(median(times.floor))} from navigation in this browser)`);
}
