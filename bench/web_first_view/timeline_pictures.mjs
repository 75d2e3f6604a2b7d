// Pictures of the same snapshots' timelines, side by side: PyTorch's memory_viz page (its Active
// Memory Timeline) and memsnap's web timeline, in Debian's headless Chromium, offline.
//   node timeline_pictures.mjs MEMSNAP MEMORYVIZ_JS NODE_MODULES OUT_DIR SNAPSHOT...
// Writes OUT_DIR/<name>.memory_viz.png (plain pickles only: memory_viz reads nothing else) and
// OUT_DIR/<name>.memsnap.png, 1400x900. memory_viz is served as web_first_view.mjs serves it
// (d3 v5 bundled by esbuild, an import map for its CDN imports, the file by add_remote_files);
// memsnap is `MEMSNAP serve FILE`, opened at #timeline/1. MEMSNAP_DETAIL=N draws N bands
// (the page's Detail), MEMVIZ_TIMEOUT_MS bounds each page (default 600000).
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';

const [memsnap, memoryVizPath, nodeModules, outDir, ...snapshots] = process.argv.slice(2);
if (!memsnap || !memoryVizPath || !nodeModules || !outDir || snapshots.length === 0) {
  console.error('usage: node timeline_pictures.mjs MEMSNAP MEMORYVIZ_JS NODE_MODULES OUT_DIR SNAPSHOT...');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nodeModules), 'x.js'));
const { chromium } = require('playwright-core');
const { buildSync } = require('esbuild');
const timeoutMs = Number(process.env.MEMVIZ_TIMEOUT_MS || 600000);
const viewport = { width: 1400, height: 900 };
mkdirSync(outDir, { recursive: true });

const memoryVizJs = readFileSync(memoryVizPath);
const d3Bundle = buildSync({ entryPoints: [path.join(nodeModules, 'd3/index.js')], bundle: true, format: 'esm',
                             minify: true, write: false, logLevel: 'error' }).outputFiles[0].text;
const imports = Object.fromEntries(['d3@5', 'd3-axis@1', 'd3-scale@1', 'd3-zoom@1', 'd3-brush@1']
  .map(name => [`https://cdn.skypack.dev/${name}`, '/d3.mjs']));

function memoryVizPage(name) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><script type="importmap">${JSON.stringify({ imports })}</script></head><body>
<script type="module">
import { add_remote_files } from '/MemoryViz.js';
add_remote_files([{ name: ${JSON.stringify(name)}, url: '/snapshot.pickle' }]);
</script></body></html>`;
}

function memoryVizServer(name, bytes) {
  const page = memoryVizPage(name);
  const server = createServer((request, response) => {
    const url = new URL(request.url, 'http://localhost');
    const send = (type, body) => { response.writeHead(200, { 'Content-Type': type }); response.end(body); };
    if (url.pathname === '/') return send('text/html', page);
    if (url.pathname === '/MemoryViz.js') return send('text/javascript', memoryVizJs);
    if (url.pathname === '/d3.mjs') return send('text/javascript', d3Bundle);
    if (url.pathname === '/snapshot.pickle') return send('application/octet-stream', bytes);
    response.writeHead(404); response.end();
  });
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function startMemsnap(file) {
  const server = spawn(memsnap, ['serve', file, '--port', '0', '--max-upload-mb', '2048'], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let output = '';
    const take = chunk => {
      output += chunk;
      const match = /http:\/\/[^\s]+\//.exec(output);
      if (match) resolve({ server, url: match[0] });
    };
    server.stdout.on('data', take);
    server.stderr.on('data', take);
    server.on('error', reject);
    server.on('exit', code => reject(new Error(`memsnap serve exited with ${code}: ${output}`)));
  });
}

function stopMemsnap(server) {
  if (server.exitCode !== null || server.signalCode !== null) return Promise.resolve();
  return new Promise(resolve => {
    const kill = setTimeout(() => server.kill('SIGKILL'), 5000);
    server.once('exit', () => { clearTimeout(kill); resolve(); });
    server.kill('SIGINT');
  });
}

const twoFrames = () => new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)));

async function withPage(browser, body) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', error => errors.push(error.message));
  try { return await body(page, errors); } finally { await context.close(); }
}

async function shootMemoryViz(browser, file, out) {
  const bytes = readFileSync(file);
  if (bytes[0] !== 0x80) return 'skipped: memory_viz reads plain pickles only';
  const server = await memoryVizServer(path.basename(file), bytes);
  try {
    return await withPage(browser, async (page, errors) => {
      const started = Date.now();
      await page.goto(`http://127.0.0.1:${server.address().port}/`);
      // create_trace_view builds the whole SVG synchronously: plot polygons, axis, then the
      // minimap polygon, then the context <pre>. The <pre> being there means the plot is complete.
      const failure = new Promise((_, reject) => page.on('pageerror', error => reject(new Error(`page error: ${error.message}`))));
      failure.catch(() => {});  // a later error must not crash node once the race is over
      await Promise.race([failure, page.waitForFunction(
        () => document.querySelector('svg polygon') && [...document.querySelectorAll('pre')].some(p => p.textContent === 'none'),
        null, { timeout: timeoutMs, polling: 100 })]);
      await page.evaluate(twoFrames);
      const painted = Date.now() - started;
      const polygons = await page.evaluate(() => document.querySelectorAll('svg polygon').length);
      await page.screenshot({ path: out });
      return `${polygons} polygons, painted ${(painted / 1000).toFixed(1)} s after navigation`;
    });
  } finally { server.close(); }
}

async function shootMemsnap(browser, file, out) {
  const { server, url } = await startMemsnap(file);
  try {
    return await withPage(browser, async (page, errors) => {
      const { snapshots: list } = await (await fetch(`${url}api/snapshots`)).json();
      if (!list.length) throw new Error('memsnap opened no snapshot');
      const id = list[0].id;
      const started = Date.now();
      await page.goto(`${url}#timeline/${id}`);
      await page.waitForSelector('.plot canvas', { timeout: timeoutMs });
      // Painted: some pixel of the plot's canvas is not transparent.
      await page.waitForFunction(() => [...document.querySelectorAll('.plot canvas')].some(c => {
        if (!c.width || !c.height) return false;
        try {
          const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          for (let i = 3; i < data.length; i += 4) if (data[i]) return true;
        } catch { return true; }  // a WebGL canvas or the like: trust its presence
        return false;
      }), null, { timeout: timeoutMs, polling: 100 });
      if (process.env.MEMSNAP_DETAIL) {
        const before = await page.locator('.summary').innerText();
        await page.selectOption('select.detail', process.env.MEMSNAP_DETAIL);
        await page.waitForFunction(text => document.querySelector('.summary')?.innerText !== text, before, { timeout: timeoutMs });
      }
      await page.evaluate(twoFrames);
      await page.waitForTimeout(300);
      const painted = Date.now() - started;
      await page.screenshot({ path: out });
      return `snapshot id ${id}, painted ${(painted / 1000).toFixed(1)} s after navigation${errors.length ? `; page errors: ${errors.join('; ')}` : ''}`;
    });
  } finally { await stopMemsnap(server); }
}

// launch() gives the browser a fresh temporary user-data-dir (Playwright makes and removes it;
// it refuses --user-data-dir in args); each shot gets its own fresh browser context too.
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
let failed = 0;
try {
  for (const file of snapshots) {
    const name = path.basename(file).replace(/\.(pickle|pkl)(\.gz)?$/, '');
    for (const [label, shoot] of [['memory_viz', shootMemoryViz], ['memsnap', shootMemsnap]]) {
      const out = path.join(outDir, `${name}.${label}.png`);
      try { console.log(`${out}: ${await shoot(browser, file, out)}`); }
      catch (error) { failed++; console.log(`${out}: FAILED: ${error.message.split('\n')[0]}`); }
    }
  }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
