// Trace: the event trace a page at a time, filtered on the server (device, actions, size,
// address, frame text), so a million events never travel to the browser. Click a row for
// its whole stack.
import { api } from './api.js';
import { escapeHtml, hex, humanBytes } from './format.js';
import { loading } from './ui.js';

const ACTIONS = ['alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'segment_map',
  'segment_unmap', 'oom', 'snapshot'];
const PAGE = 100;

export async function renderTrace(container, { snapshot }) {
  const devices = snapshot.devices.filter(d => d.events > 0).map(d => d.device);
  container.innerHTML = `
    <form class="toolbar trace-filters">
      ${devices.length > 1 ? `<label>Device <select name="device"><option value="">all</option>${devices.map(d => `<option>${d}</option>`).join('')}</select></label>` : ''}
      <label>Action <select name="action" aria-label="Action"><option value="">all</option>
        ${ACTIONS.map(a => `<option>${a}</option>`).join('')}<option value="segment_alloc,segment_free,segment_map,segment_unmap">segment events</option></select></label>
      <label>Min size <input type="text" name="min_size" size="10" placeholder="e.g. 1MiB" aria-label="Minimum size"></label>
      <label>Address <input type="text" name="address" size="16" placeholder="0x7f…" aria-label="Address"></label>
      <label>Frame <input type="search" name="frame" size="22" placeholder="function or file" aria-label="Frame text"></label>
      <button class="action" type="submit">Filter</button>
    </form>
    <div class="toolbar"><button class="action prev" disabled>← Previous</button><button class="action next" disabled>Next →</button>
      <span class="range hint"></span></div>
    <div class="rows"></div>`;
  const form = container.querySelector('form');
  const rowsBox = container.querySelector('.rows');
  let offset = 0, filters = {};

  const parseSize = (text) => {
    const match = /^\s*([\d.]+)\s*([kmgt]?)i?b?\s*$/i.exec(text);
    if (!match) return text.trim() === '' ? '' : NaN;
    return Math.round(parseFloat(match[1]) * Math.pow(1024, ' kmgt'.indexOf((match[2] || ' ').toLowerCase())));
  };

  const show = async () => {
    loading(rowsBox, 'events');
    let page;
    try {
      page = await api.trace(snapshot.id, { ...filters, offset, limit: PAGE });
    } catch (error) {
      rowsBox.innerHTML = `<div class="message error">${escapeHtml(error.message)}</div>`;
      return;
    }
    container.querySelector('.range').textContent = page.matched
      ? `events ${offset + 1}–${offset + page.events.length} of ${page.matched} matching` : 'no events match';
    container.querySelector('.prev').disabled = offset === 0;
    container.querySelector('.next').disabled = offset + PAGE >= page.matched;
    rowsBox.innerHTML = `<table class="data"><thead><tr><th class="num">#</th><th class="num">time</th><th>dev</th><th>action</th>
      <th>address</th><th class="num">size</th><th>stream</th><th>frame</th></tr></thead><tbody>${page.events.map(e =>
      `<tr tabindex="0" data-stack="${e.stack}"><td class="num">${e.index}</td><td class="num">${(e.time_us / 1e6).toFixed(6)}</td><td>${e.device}</td>
       <td>${escapeHtml(e.action)}</td><td>${hex(e.address)}</td><td class="num">${humanBytes(e.size)}</td><td>${hex(e.stream)}</td>
       <td class="frame">${escapeHtml(e.frame || '(no stack)')}</td></tr>`).join('')}</tbody></table>`;
  };

  const toggleStack = async (row) => {
    if (row.nextElementSibling?.classList.contains('stack')) { row.nextElementSibling.remove(); return; }
    const stack = Number(row.dataset.stack);
    const detail = document.createElement('tr');
    detail.className = 'stack';
    detail.innerHTML = `<td colspan="8"><div class="stack-lines">${stack < 0 ? '(no stack recorded)' : 'loading…'}</div></td>`;
    row.after(detail);
    if (stack < 0) return;
    try {
      const { frames } = await api.stack(snapshot.id, stack);
      detail.querySelector('.stack-lines').innerHTML = frames.map(f => `<span class="${f.python ? 'py' : f.dispatcher ? 'dispatch' : 'cpp'}" title="${escapeHtml(f.function || '')}">${escapeHtml(f.label)}</span>`).join('\n') || '(no visible frames)';
    } catch (error) { detail.querySelector('.stack-lines').textContent = error.message; }
  };
  rowsBox.addEventListener('click', e => { const row = e.target.closest('tr[data-stack]'); if (row) toggleStack(row); });
  rowsBox.addEventListener('keydown', e => {
    const row = e.target.closest('tr[data-stack]');
    if (row && (e.key === 'Enter' || e.key === ' ')) { toggleStack(row); e.preventDefault(); }
  });

  form.addEventListener('submit', e => {
    e.preventDefault();
    const values = Object.fromEntries(new FormData(form));
    const minSize = parseSize(values.min_size || '');
    if (Number.isNaN(minSize)) { rowsBox.innerHTML = '<div class="message error">Min size: a number of bytes, optionally with KiB, MiB or GiB</div>'; return; }
    filters = { device: values.device, action: values.action, min_size: minSize, address: values.address?.trim(), frame: values.frame };
    offset = 0;
    show();
  });
  container.querySelector('.prev').addEventListener('click', () => { offset = Math.max(0, offset - PAGE); show(); });
  container.querySelector('.next').addEventListener('click', () => { offset += PAGE; show(); });
  await show();
}
