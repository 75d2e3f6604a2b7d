// Compare: two snapshots side by side: reserved and allocated before and after, the segments
// only one of them has, and a differential flamegraph of allocated bytes by stack.
import { api } from './api.js';
import { escapeHtml, hex, humanBytes, signedBytes } from './format.js';
import { Flamegraph } from './flamegraph.js';
import { loading } from './ui.js';

const options = (snapshots, selected) => snapshots.map(s =>
  `<option value="${s.id}" ${s.id === selected ? 'selected' : ''}>${escapeHtml(s.name)} (#${s.id})</option>`).join('');

function segmentTable(title, segments) {
  if (!segments.length) return `<h2>${title}: none</h2>`;
  return `<h2>${title}: ${segments.length}</h2><table class="data"><thead><tr><th>device</th><th>address</th><th class="num">size</th>
    <th>pool</th><th>stream</th><th class="num">allocated</th></tr></thead><tbody>${segments.slice(0, 500).map(s =>
    `<tr><td>${s.device}</td><td>${hex(s.address)}</td><td class="num">${humanBytes(s.total_size)}</td><td>${escapeHtml(s.segment_type)}</td>
     <td>${hex(s.stream)}</td><td class="num">${humanBytes(s.allocated_size)}</td></tr>`).join('')}</tbody></table>
     ${segments.length > 500 ? `<div class="hint">… and ${segments.length - 500} more</div>` : ''}`;
}

function change(before, after) {
  const delta = after - before;
  return `${humanBytes(before)} → ${humanBytes(after)} <span class="${delta > 0 ? 'grew' : delta < 0 ? 'shrank' : ''}">(${signedBytes(delta)})</span>`;
}

export async function renderCompare(container, { snapshots, snapshot, compareBefore }) {
  if (snapshots.length < 2) {
    container.innerHTML = '<div class="empty">Open a second snapshot to compare (Open snapshot… or drop a file here).</div>';
    return;
  }
  const others = snapshots.filter(s => s.id !== snapshot.id);
  const before = others.some(s => s.id === compareBefore) ? compareBefore : others[0].id;
  container.innerHTML = `
    <div class="toolbar">
      <label>Before <select class="before" aria-label="Before">${options(snapshots, before)}</select></label>
      <label>After <select class="after" aria-label="After">${options(snapshots, snapshot.id)}</select></label>
      <span class="hint">red: grew · blue: shrank · width: before + after</span>
    </div>
    <div class="result"></div>`;
  const result = container.querySelector('.result');
  const show = async () => {
    const before = container.querySelector('.before').value, after = container.querySelector('.after').value;
    loading(result, 'comparison');
    const data = await api.compare(before, after);
    result.innerHTML = `
      <div class="cards">
        <div class="card"><div class="label">reserved</div><div class="value">${change(data.before.reserved_bytes, data.after.reserved_bytes)}</div></div>
        <div class="card"><div class="label">allocated</div><div class="value">${change(data.before.allocated_bytes, data.after.allocated_bytes)}</div></div>
      </div>
      <h2>Allocated memory by stack</h2><div class="graph"></div>
      ${segmentTable('Segments only before', data.only_before)}
      ${segmentTable('Segments only after', data.only_after)}`;
    new Flamegraph(result.querySelector('.graph'), data.flamegraph, { differential: true, unit: 'allocations' });
  };
  container.querySelectorAll('select').forEach(s => s.addEventListener('change', show));
  await show();
}
