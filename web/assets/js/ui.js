// Small pieces every view shares: the floating tooltip, crisp canvases on high-DPI screens,
// and the status/error line.
import { escapeHtml } from './format.js';

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
