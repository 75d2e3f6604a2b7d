// Small pieces every view shares: the floating tooltip, crisp canvases on high-DPI screens,
// and the status/error line.
import { escapeHtml, humanBytes } from './format.js';

const tooltip = () => document.getElementById('tooltip');

export function showTooltip(event, html) {
  const box = tooltip();
  box.innerHTML = html;
  box.hidden = false;
  const pad = 14, { innerWidth, innerHeight } = window;
  const rect = box.getBoundingClientRect();
  let x = event.clientX + pad, y = event.clientY + pad;
  if (x + rect.width > innerWidth - 4) x = Math.max(4, event.clientX - rect.width - pad);
  if (y + rect.height > innerHeight - 4) y = Math.max(4, event.clientY - rect.height - pad);
  box.style.left = `${x}px`;
  box.style.top = `${y}px`;
}

export function hideTooltip() { tooltip().hidden = true; }

// A stack, innermost first: the user's innermost Python frame on a line of its own at the top
// (where a stack has one below C++ frames), then every shown frame; Python frames stand out, folded dispatcher
// frames are muted, and each frame's full text is its title.
export function framesHtml(frames, limit = 40) {
  if (!frames || frames.length === 0) return '<div class="frames">(no stack recorded)</div>';
  const python = frames.find(f => f.python);
  const headline = python && python !== frames[0] ? `<div class="headline">${escapeHtml(python.label)}</div>` : '';
  const line = f => `<span class="${f.python ? 'py' : f.dispatcher ? 'dispatch' : 'cpp'}" title="${escapeHtml(f.function || '')}">${escapeHtml(f.label)}</span>`;
  const shown = frames.slice(0, limit).map(line).join('\n');
  const more = frames.length > limit ? `\n… ${frames.length - limit} more frames` : '';
  return `${headline}<div class="frames">${shown}${more}</div>`;
}

// Sizes a canvas to its CSS box times the device pixel ratio; returns a context in CSS pixels.
export function prepareCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.width = Math.max(1, Math.round(width * ratio));
  canvas.height = Math.max(1, Math.round(height * ratio));
  const context = canvas.getContext('2d');
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  context.textBaseline = 'middle';
  return context;
}

export function setMessage(text, isError = false) {
  const box = document.getElementById('message');
  box.textContent = text || '';
  box.classList.toggle('error', isError);
  box.hidden = !text;
}

export function loading(container, what) {
  container.innerHTML = `<div class="hint">Loading ${escapeHtml(what)}…</div>`;
}

// Runs `draw` again when the window is resized, until `container` leaves the page.
export function redrawOnResize(container, draw) {
  let pending = 0;
  const onResize = () => {
    if (!container.isConnected) { window.removeEventListener('resize', onResize); return; }
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(draw);
  };
  window.addEventListener('resize', onResize);
}

// A stack pinned by a click: a panel that stays, scrolls, and shows full file paths on demand.
// `title` is HTML (already escaped); `stacks` is [{caption, frames}] (innermost first).
export function pinStacks(title, stacks) {
  let panel = document.getElementById('pinned');
  if (!panel) {
    panel = document.createElement('aside');
    panel.id = 'pinned';
    panel.className = 'pinned';
    panel.setAttribute('aria-label', 'Pinned stack');
    document.body.appendChild(panel);
  }
  const fullPaths = panel.dataset.fullPaths === '1';
  const line = f => {
    const where = f.file ? ` (${escapeHtml(f.file)}${f.line > 0 ? ':' + f.line : ''})` : '';
    const text = fullPaths ? `${escapeHtml(f.function || f.label)}${where}` : escapeHtml(f.label);
    return `<span class="${f.python ? 'py' : f.dispatcher ? 'dispatch' : 'cpp'}" title="${escapeHtml(f.function || '')}${where}">${text}</span>`;
  };
  const body = stacks.map(({ caption, frames }) => `${caption ? `<div class="caption">${caption}</div>` : ''}
    <div class="frames">${frames?.length ? frames.map(line).join('\n') : '(no stack recorded)'}</div>`).join('');
  panel.innerHTML = `<div class="pinned-head">${title}
      <label class="hint"><input type="checkbox" class="full-paths" ${fullPaths ? 'checked' : ''}> full paths</label>
      <button class="close" aria-label="Unpin">×</button></div>
    <div class="pinned-body">${body}</div>`;
  panel.hidden = false;
  panel.querySelector('.close').addEventListener('click', unpinStacks);
  panel.querySelector('.full-paths').addEventListener('change', e => {
    panel.dataset.fullPaths = e.target.checked ? '1' : '0';
    pinStacks(title, stacks);
  });
}

export function unpinStacks() {
  const panel = document.getElementById('pinned');
  if (panel) panel.hidden = true;
}

// A search box for a view: frame text or an address, answered by the server across the whole
// snapshot. `onResult(result | null)` gets the answer (null when cleared); the box shows the counts.
export function searchBox(container, search, onResult) {
  const box = document.createElement('span');
  box.className = 'find-box';
  box.innerHTML = `<input type="search" class="find" placeholder="Find frame text or 0x address" aria-label="Find"
    size="28"><span class="find-result hint"></span>`;
  container.appendChild(box);
  const input = box.querySelector('input'), out = box.querySelector('.find-result');
  const run = async () => {
    const q = input.value.trim();
    if (!q) { out.textContent = ''; onResult(null); return; }
    try {
      const result = await search(q);
      const parts = [];
      if (result.address !== undefined) parts.push(result.block ? `address in a ${result.block.state.replace(/_/g, ' ')} block` : 'address in no segment');
      if (result.stacks.length) parts.push(`${result.stacks.length}${result.stacks_truncated ? '+' : ''} stacks · ${result.live_blocks} live blocks (${humanBytes(result.live_bytes)}) · ${result.trace_events} trace events`);
      else if (result.address === undefined) parts.push('no frame matches');
      out.textContent = parts.join(' · ');
      onResult(result);
    } catch (error) { out.textContent = error.message; }
  };
  input.addEventListener('keydown', e => { if (e.key === 'Enter') run(); });
  input.addEventListener('search', run);  // the clear button
  return input;
}

