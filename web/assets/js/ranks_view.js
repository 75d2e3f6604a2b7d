// Ranks: a distributed job's snapshots side by side (memsnap serve DIR). One row per rank,
// sortable by any column, with each rank's active memory over its trace drawn on the same
// scale for every rank; the rank that ran out of memory and the outliers against the typical
// rank stand out, with the call sites that make the difference, under the verdict memsnap ranks
// prints (or why it cannot judge). A row opens its rank's views; "vs median" opens the Compare
// view against the typical rank.
import { api } from './api.js';
import { escapeHtml, grouped, humanBytes, signedBytes } from './format.js';
import { loading } from './ui.js';

const columns = [
  { key: 'rank', label: 'rank', num: true, value: r => r.rank ?? Infinity, show: r => r.rank ?? '?' },
  { key: 'host', label: 'host', value: r => r.host || '', show: r => escapeHtml(r.host || '—') },
  { key: 'peak_reserved_bytes', label: 'peak reserved', num: true, bytes: true },
  { key: 'peak_allocated_bytes', label: 'peak allocated', num: true, bytes: true },
  { key: 'reserved_bytes', label: 'reserved', num: true, bytes: true, title: 'when the snapshot was taken' },
  { key: 'allocated_bytes', label: 'allocated', num: true, bytes: true, title: 'when the snapshot was taken' },
  { key: 'fragmentation', label: 'frag', num: true, show: r => `${(100 * r.fragmentation).toFixed(1)}%`,
    title: 'free bytes stranded in segments that hold live blocks, as a share of reserved' },
  { key: 'segments', label: 'segments', num: true },
  { key: 'alloc_retries', label: 'retries', num: true, value: r => r.alloc_retries ?? -1, show: r => r.alloc_retries ?? '—',
    title: 'device allocations that failed and were retried after freeing the cache' },
  { key: 'ooms', label: 'OOMs', num: true },
  { key: 'versus', label: 'vs median', num: true, title: 'peak reserved against the median rank' },
  { key: 'file', label: 'file', value: r => baseName(r.file), show: r => escapeHtml(baseName(r.file)) },
];

function baseName(path) { return path.split('/').pop(); }

// The job table, fetched once per page load (it never changes while the server runs).
let jobPromise = null;
export function loadJob() {
  jobPromise ??= api.ranks().catch(error => { jobPromise = null; throw error; });
  return jobPromise;
}

let sortKey = 'rank', descending = false, onlyNotable = false;

function sparkline(values, scale) {
  if (!values.length || !scale) return '<span class="hint">no trace</span>';
  const w = 160, h = 26;
  const step = values.length > 1 ? w / (values.length - 1) : 0;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 1 - (h - 2) * v / scale).toFixed(1)}`).join(' ');
  return `<svg class="spark" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" aria-hidden="true">
    <polyline points="0,${h - 1} ${points} ${w},${h - 1}" /></svg>`;
}

function describeOom(r) {
  const o = r.last_oom;
  if (!o) return `${r.ooms} out-of-memory error(s), counted by the allocator`;
  const free = o.device_free_bytes == null ? '' : `, ${humanBytes(o.device_free_bytes)} free on the device`;
  return `asked for ${humanBytes(o.requested_bytes)} at event ${grouped(o.event)} of device ${o.device}${free}`;
}

export async function renderRanks(container, { openRank }) {
  loading(container, 'ranks');
  const job = await loadJob();
  const ranks = job.ranks.map((r, row) => ({ ...r, row }));
  const median = ranks[job.median_row];
  const outlierOf = new Map(job.outliers.map(o => [o.row, o]));
  for (const r of ranks)
    r.versus = median.peak_reserved_bytes ? 100 * (r.peak_reserved_bytes / median.peak_reserved_bytes - 1) : 0;
  const scale = Math.max(1, ...ranks.map(r => Math.max(0, ...r.active_timeline)));
  const name = r => (r.rank == null ? escapeHtml(baseName(r.file)) : `rank ${r.rank}`);

  // One line per error: a rank's OOM dump and its later snapshots hold the same one.
  const seen = new Set();
  const ooms = job.oom_rows.map(row => ranks[row]).filter(r => {
    const key = r.last_oom ? `${r.rank}/${r.last_oom.time_us}/${r.last_oom.requested_bytes}` : `row ${r.row}`;
    return !seen.has(key) && seen.add(key);
  });
  container.innerHTML = `
    <div class="cards">
      <div class="card"><div class="label">ranks</div><div class="value">${grouped(ranks.length)}</div></div>
      <div class="card" title="the rank most others peak within ${job.outlier_percent}% of"><div class="label">typical rank</div>
        <div class="value">${name(median)}: ${humanBytes(median.peak_reserved_bytes)}</div></div>
      <div class="card"><div class="label">out of memory</div><div class="value ${ooms.length ? 'grew' : ''}">${
        ooms.length ? [...new Set(ooms.map(name))].slice(0, 3).join(', ') + (ooms.length > 3 ? ' …' : '') : 'none'}</div></div>
      <div class="card" title="peak reserved ${job.outlier_percent}% or more from the typical rank's, where the typical ranks outnumber any other group"><div class="label">outliers</div>
        <div class="value">${job.verdict && !job.verdict.judged ? 'cannot judge' : job.outliers.length}</div></div>
    </div>
    <p class="ranks-verdict" data-verdict="${escapeHtml(job.verdict ? job.verdict.answer : '')}">${escapeHtml(job.conclusion || '')}</p>
    ${ooms.map(r => `<div class="oom-headline"><div class="cause">${name(r)} ran out of memory</div>
      ${escapeHtml(describeOom(r))} · <button class="action" data-open="${r.row}" data-view="oom">Explain</button></div>`).join('')}
    ${job.notes.map(n => `<div class="hint">note: ${escapeHtml(n)}</div>`).join('')}
    ${job.skipped.length ? `<div class="hint">not read: ${job.skipped.slice(0, 5).map(s => escapeHtml(s.error)).join('; ')}${
      job.skipped.length > 5 ? ` … ${job.skipped.length - 5} more` : ''}</div>` : ''}
    <div class="toolbar">
      <label><input type="checkbox" class="notable" ${onlyNotable ? 'checked' : ''}> only ranks that ran out of memory or stand out</label>
      <span class="hint">click a rank to open its views · memory over time on one scale (${humanBytes(scale)} at the top)</span>
    </div>
    <div class="table-box"></div>
    <div class="outliers"></div>`;

  // The rows are made once; sorting moves them and the filter hides them, so a thousand-rank
  // job re-sorts without redrawing its sparklines.
  const box = container.querySelector('.table-box');
  const cell = (c, r) => {
    if (c.key === 'versus') {
      if (r.row === job.median_row) return 'median';
      const o = outlierOf.get(r.row);
      return `<span class="${o ? (r.versus > 0 ? 'grew' : 'shrank') : ''}">${r.versus >= 0 ? '+' : ''}${r.versus.toFixed(0)}%</span>`;
    }
    if (c.show) return c.show(r);
    return c.bytes ? humanBytes(r[c.key]) : escapeHtml(String(r[c.key]));
  };
  box.innerHTML = `<table class="data ranks"><thead><tr>${columns.map(c => `<th class="${c.num ? 'num' : ''} sortable"
      data-sort="${c.key}" title="${escapeHtml(c.title || 'sort')}">${c.label}</th>`).join('')}<th>active memory over time</th><th></th></tr></thead>
    <tbody>${ranks.map(r => `<tr data-row="${r.row}" class="${r.ooms ? 'oom' : outlierOf.has(r.row) ? 'outlier' : ''}" tabindex="0"
        title="${escapeHtml(r.file)}">${columns.map(c => `<td class="${c.num ? 'num' : ''}">${cell(c, r)}</td>`).join('')}
        <td>${sparkline(r.active_timeline, scale)}</td>
        <td>${r.row === job.median_row ? '' : `<button class="action" data-compare="${r.row}">vs median</button>`}</td></tr>`).join('')}
    </tbody></table><div class="hint none-shown" hidden>No rank ran out of memory or stands out.</div>`;
  const tbody = box.querySelector('tbody');
  const rowElements = [...tbody.children];
  const drawTable = () => {
    const column = columns.find(c => c.key === sortKey);
    const value = column.value || (r => r[column.key]);
    const order = [...ranks].sort((a, b) => {
      const x = value(a), y = value(b);
      const byValue = typeof x === 'string' ? x.localeCompare(y) : x - y;
      return (descending ? -byValue : byValue) || a.row - b.row;
    });
    let shown = 0;
    for (const r of order) {
      const visible = !onlyNotable || r.ooms > 0 || outlierOf.has(r.row);
      rowElements[r.row].hidden = !visible;
      shown += visible;
    }
    tbody.append(...order.map(r => rowElements[r.row]));
    box.querySelector('.none-shown').hidden = shown > 0;
    for (const th of box.querySelectorAll('th[data-sort]')) {
      const column = columns.find(c => c.key === th.dataset.sort);
      const active = column.key === sortKey;
      th.setAttribute('aria-sort', active ? (descending ? 'descending' : 'ascending') : 'none');
      th.textContent = column.label + (active ? (descending ? ' ▾' : ' ▴') : '');
    }
  };
  drawTable();

  container.querySelector('.outliers').innerHTML = job.outliers.length ? `<h2>Outliers against the typical rank (${name(median)})</h2>
    ${job.outliers.slice(0, 50).map(o => {
      const r = ranks[o.row];
      return `<div class="outlier-box"><b>${name(r)}</b> reserves ${Math.abs(o.percent_vs_median).toFixed(0)}% ${o.percent_vs_median > 0 ? 'more' : 'less'}
        than the typical rank (${humanBytes(r.peak_reserved_bytes)} against ${humanBytes(median.peak_reserved_bytes)}), with ${escapeHtml(o.why || '')}
        <button class="action" data-compare="${o.row}">Compare with the typical rank</button>
        ${o.sites.length ? `<table class="data"><thead><tr><th class="num">difference</th><th class="num">${name(r)}</th>
          <th class="num">typical rank</th><th>call site (live at each rank's peak)</th></tr></thead><tbody>${o.sites.map(s => `<tr>
          <td class="num ${s.difference_bytes > 0 ? 'grew' : 'shrank'}">${signedBytes(s.difference_bytes)}</td>
          <td class="num">${humanBytes(s.rank_bytes)}</td><td class="num">${humanBytes(s.median_bytes)}</td>
          <td class="frame">${escapeHtml(s.site)}</td></tr>`).join('')}</tbody></table>` : ''}</div>`;
    }).join('')}${job.outliers.length > 50 ? `<div class="hint">… and ${job.outliers.length - 50} more outliers</div>` : ''}` : '';

  container.querySelector('.notable').addEventListener('change', e => { onlyNotable = e.target.checked; drawTable(); });
  container.addEventListener('click', async e => {
    const header = e.target.closest('th[data-sort]');
    if (header) {
      descending = header.dataset.sort === sortKey ? !descending : header.dataset.sort !== 'rank' && header.dataset.sort !== 'host';
      sortKey = header.dataset.sort;
      drawTable();
      return;
    }
    const compare = e.target.closest('[data-compare]');
    if (compare) { await openRank(Number(compare.dataset.compare), 'compare', job.median_row); return; }
    const open = e.target.closest('[data-open]');
    if (open) { await openRank(Number(open.dataset.open), open.dataset.view || 'stats'); return; }
    const row = e.target.closest('tr[data-row]');
    if (row) await openRank(Number(row.dataset.row), 'timeline');
  });
  container.addEventListener('keydown', async e => {
    const row = e.target.closest('tr[data-row]');
    if (row && e.key === 'Enter') await openRank(Number(row.dataset.row), 'timeline');
  });
}
