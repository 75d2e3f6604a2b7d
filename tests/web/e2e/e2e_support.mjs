// What the browser tests share: `memsnap serve` started on a free port (its URL read from its
// output), headless Chromium from playwright-core, and named steps that report their time.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

// Starts `memsnap serve --port 0 ARGS...`; resolves to { server, url } once it prints its URL.
export function startServer(binary, args, timeoutMs = 60000) {
  const server = spawn(binary, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no URL from memsnap serve: ${output}`)), timeoutMs);
    server.stdout.on('data', chunk => {
      output += chunk;
      const match = /http:\/\/[^\s]+\//.exec(output);
      if (match) { clearTimeout(timer); resolve({ server, url: match[0] }); }
    });
    server.on('exit', code => reject(new Error(`memsnap serve exited with ${code}: ${output}`)));
  });
}

export function launchChromium(nodeModules) {
  const { chromium } = createRequire(path.join(path.resolve(nodeModules), 'x.js'))('playwright-core');
  return chromium.launch({
    executablePath: process.env.MEMSNAP_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

// step(name, body): runs body, printing "ok  name (N ms)"; current() names the step running, for
// errors the page reports while it runs.
export function steps() {
  let currentStep = '';
  return {
    current: () => currentStep,
    async step(name, body) {
      currentStep = name;
      const started = Date.now();
      await body();
      console.log(`ok  ${name} (${Date.now() - started} ms)`);
    },
  };
}

// Runs the test's body, then requires that the page logged no error; prints the step that
// failed, closes the browser and the server, and exits 0 or 1.
export async function runChecked({ browser, server, problems, current }, body) {
  let failed = false;
  try {
    await body();
    if (problems.length) throw new Error(`the page logged errors:\n  ${problems.join('\n  ')}`);
  } catch (error) {
    failed = true;
    console.error(`FAILED in "${current()}": ${error.message}`);
    for (const problem of problems) console.error(`  ${problem}`);
  } finally {
    await browser.close();
    server.kill('SIGINT');
  }
  process.exit(failed ? 1 : 0);
}
