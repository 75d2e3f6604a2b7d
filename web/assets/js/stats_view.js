// Stats: the numbers a user looks at first (reserved, allocated, fragmentation), per stream,
// by block state and pool, and the same text summary as `memsnap stats`.
import { api } from './api.js';
import { escapeHtml, hex, humanBytes, percent } from './format.js';
import { loading } from './ui.js';

const card = (label, value, title = '') =>
  `<div class="card" title="${escapeHtml(title)}"><div class="label">${escapeHtml(label)}</div><div class="value">${value}</div></div>`;

export async function renderStats(container, { snapshot }) {
  loading(container, 'statistics');
  const [stats, text] = await Promise.all([api.stats(snapshot.id), api.statsText(snapshot.id)]);
  const reserved = stats.reserved_bytes;
  const free = reserved - stats.allocated_bytes;
  const states = Object.entries(stats.state_bytes || {});
  const actions = Object.entries(stats.trace_actions || {});
  container.innerHTML = `
    <div class="cards">
      ${card('reserved', humanBytes(reserved), 'sum of all segments')}
      ${card('allocated', humanBytes(stats.allocated_bytes), `${percent(stats.allocated_bytes, reserved)} of reserved`)}
      ${card('active', humanBytes(stats.active_bytes), 'allocated plus freed-but-pending (stream use)')}
      ${card('reserved but free', humanBytes(free), `${percent(free, reserved)} of reserved`)}
      ${card('inactive split', humanBytes(stats.inactive_split_bytes), 'free bytes inside segments that also hold live blocks')}
      ${card('largest free block', humanBytes(stats.largest_free_block))}
      ${card('segments / blocks', `${stats.segments} / ${stats.blocks}`)}
      ${card('trace events', String(stats.trace_entries ?? 0))}
    </div>
    <h2>By stream</h2>
    <table class="data"><thead><tr><th>device</th><th>stream</th><th class="num">segments</th><th class="num">blocks</th>
      <th class="num">reserved</th><th class="num">allocated</th><th class="num">active</th><th class="num">inactive split</th><th class="num">largest free</th></tr></thead>
    <tbody>${(stats.by_stream || []).map(s => `<tr><td>${s.device}</td><td>${hex(s.stream)}</td><td class="num">${s.segments}</td>
      <td class="num">${s.blocks}</td><td class="num">${humanBytes(s.reserved_bytes)}</td><td class="num">${humanBytes(s.allocated_bytes)}</td>
      <td class="num">${humanBytes(s.active_bytes)}</td><td class="num">${humanBytes(s.inactive_split_bytes)}</td>
      <td class="num">${humanBytes(s.largest_free_block)}</td></tr>`).join('')}</tbody></table>
    <h2>By block state</h2>
    <table class="data"><thead><tr><th>state</th><th class="num">bytes</th><th class="num">blocks</th><th class="num">share</th></tr></thead>
    <tbody>${states.map(([state, bytes]) => `<tr><td>${escapeHtml(state)}</td><td class="num">${humanBytes(bytes)}</td>
      <td class="num">${stats.state_blocks?.[state] ?? ''}</td><td class="num">${percent(bytes, reserved)}</td></tr>`).join('')}</tbody></table>
    ${actions.length ? `<h2>Trace</h2><table class="data"><thead><tr><th>action</th><th class="num">events</th></tr></thead>
      <tbody>${actions.map(([a, n]) => `<tr><td>${escapeHtml(a)}</td><td class="num">${n}</td></tr>`).join('')}</tbody></table>` : ''}
    <h2>Summary</h2>
    <pre class="summary">${escapeHtml(text)}</pre>`;
}
