// Stats: the numbers a user looks at first (reserved, allocated, fragmentation), per stream,
// by block state and pool, and the same text summary as `memsnap stats`.
import { api } from './api.js';
import { counted, escapeHtml, grouped, hex, humanBytes, percent } from './format.js';
import { loading } from './ui.js';

const card = (label, value, title = '') =>
  `<div class="card" title="${escapeHtml(title)}"><div class="label">${escapeHtml(label)}</div><div class="value">${value}</div></div>`;

// The peaks first, and which peak each is: the allocator's statistics (the process's, in block
// bytes) where the snapshot holds them, and the busiest trace's (its window, requested bytes)
// with a link to the segments right after the entry where it held.
function peakCards(stats, snapshot) {
  const peaks = stats.peaks || { statistics: [], traces: [] };
  const sum = key => peaks.statistics.reduce((total, p) => total + (p[key] ?? 0), 0);
  const perDevice = peaks.statistics.length > 1 ? `, the sum of ${peaks.statistics.length} devices' peaks` : '';
  const cards = [];
  if (peaks.statistics.length) {
    const since = 'since the process started or reset_peak_memory_stats()';
    cards.push(card('peak reserved', humanBytes(sum('reserved_bytes')), `allocator statistics, ${since}${perDevice}`));
    cards.push(card('peak allocated', humanBytes(sum('allocated_bytes')),
      `block bytes (torch.cuda.max_memory_allocated), ${since}${perDevice}` +
      (peaks.statistics.every(p => p.requested_bytes != null) ? `; requested: ${humanBytes(sum('requested_bytes'))}` : '')));
  }
  const trace = peaks.traces.reduce((best, t) => (!best || t.entries > best.entries ? t : best), null);
  if (trace) {
    const where = trace.in_use_entry == null ? 'at the trace\'s first entry'
      : `after <a class="peak-link" href="#segments/${encodeURIComponent(snapshot.id)}/${trace.in_use_entry}" ` +
        `title="the segments right after this entry of the trace">entry ${grouped(trace.in_use_entry)}</a>`;
    const before = trace.in_use_at_start ? `, ${humanBytes(trace.in_use_at_start)} of it live before the trace began` : '';
    cards.push(`<div class="card" title="${escapeHtml(`requested bytes not yet freed, as the Timeline draws them; the trace's ` +
      `${trace.entries} entries only${before}` + (peaks.statistics.length ? '' : '; PyTorch snapshots hold no process-wide peak'))}">
      <div class="label">peak in use during the trace${peaks.traces.length > 1 ? ` (device ${trace.device})` : ''}</div>
      <div class="value">${humanBytes(trace.in_use_bytes)}</div><div class="hint">${where}</div></div>`);
    if (!peaks.statistics.length)
      cards.push(card('peak reserved during the trace', humanBytes(trace.reserved_bytes),
        `segments reserved, at most, over the trace's ${trace.entries} entries`));
  }
  return cards.join('');
}

// Asks for what the stats of snapshot `id` show first (api.ahead).
export const prefetchStats = id => api.ahead('stats', id);

// The whole device at the snapshot, from the driver's figures (absent from PyTorch's snapshots):
// the allocator's part, what was held outside it (split into this process and others only where
// NVML lists this process), and what was free; a bar and a table per device.
function deviceMemoryHtml(accounts) {
  if (!accounts || !accounts.length) return '';
  const parts = a => {
    const rows = [['allocated (live)', a.allocated_bytes, 'hsl(20, 80%, 60%)'],
      ['reserved, cached free', a.reserved_bytes - a.allocated_bytes, 'hsl(205, 45%, 70%)']];
    // The libraries' share is shown where the figures split it without contradiction.
    const libraries = a.libraries_bytes != null && (a.context_bytes != null ||
      (a.this_process_outside_bytes == null && a.outside_bytes != null && a.outside_bytes >= a.libraries_bytes));
    if (libraries) {
      // Each library that asked CUDA for memory outside the allocator, from the recorded calls.
      (a.libraries || []).forEach((l, i) => rows.push([`${l.library || '(library not known)'} (outside the allocator)`, l.bytes,
        `hsl(${(150 + 37 * i) % 360}, 40%, ${52 + (i % 3) * 8}%)`]));
    }
    if (libraries && a.context_bytes != null) {
      rows.push(['CUDA context and unaccounted (no recorded call made it)', a.context_bytes, 'hsl(0, 0%, 55%)']);
      if ((a.other_processes || []).length) rows.push(['other processes', a.other_processes_bytes, 'hsl(280, 25%, 60%)']);
      const unlisted = a.outside_bytes == null ? 0 : a.outside_bytes - a.this_process_outside_bytes - a.other_processes_bytes;
      if (unlisted > 0) rows.push(['in use, not listed by NVML', unlisted, 'hsl(0, 0%, 75%)']);
    } else if (libraries && a.outside_bytes != null && a.this_process_outside_bytes == null) {
      rows.push(['the rest outside the allocator (CUDA context, other processes)', Math.max(0, a.outside_bytes - a.libraries_bytes), 'hsl(0, 0%, 55%)']);
    } else if (a.this_process_outside_bytes != null) {
      rows.push(['this process outside the allocator (CUDA context, other libraries)', a.this_process_outside_bytes, 'hsl(0, 0%, 55%)']);
      if ((a.other_processes || []).length) rows.push(['other processes', a.other_processes_bytes, 'hsl(280, 25%, 60%)']);
      const unlisted = a.outside_bytes == null ? 0 : a.outside_bytes - a.this_process_outside_bytes - a.other_processes_bytes;
      if (unlisted > 0) rows.push(['in use, not listed by NVML', unlisted, 'hsl(0, 0%, 75%)']);
    } else if (a.outside_bytes != null) {
      rows.push(['outside the allocator (CUDA context, other libraries, other processes)', a.outside_bytes, 'hsl(0, 0%, 55%)']);
    }
    rows.push(['free', a.free_bytes, 'hsl(0, 0%, 93%)']);
    return rows.filter(([, bytes]) => bytes > 0);
  };
  return `<h2>The whole device</h2>
    <p class="hint">What the driver counted when the snapshot was taken: the allocator's segments, memory held outside it, and what was free.</p>
    ${accounts.map(a => {
      const rows = parts(a);
      const bar = rows.map(([name, bytes, colour]) => `<div class="part" style="width:${(100 * bytes / Math.max(a.total_bytes, 1)).toFixed(3)}%;background:${colour}"
        title="${escapeHtml(name)}: ${humanBytes(bytes)} (${percent(bytes, a.total_bytes)})"></div>`).join('');
      const others = (a.other_processes || []).slice(0, 8).map(p => `pid ${p.pid} ${humanBytes(p.bytes)}`).join(', ');
      return `<h3>device ${a.device}: ${humanBytes(a.total_bytes)}</h3>
        <div class="oom-bar device-memory-bar" role="img" aria-label="device ${a.device} memory">${bar}</div>
        <table class="data device-memory"><tbody>${rows.map(([name, bytes, colour]) => `<tr><td><span class="swatch" style="background:${colour}"></span>${escapeHtml(name)}</td>
          <td class="num">${humanBytes(bytes)}</td><td class="num">${percent(bytes, a.total_bytes)}</td>
          <td class="hint">${name === 'other processes' ? escapeHtml(others) : ''}</td></tr>`).join('')}</tbody></table>
        ${a.before_first_segment_bytes != null ? `<p class="hint">Before the allocator first asked the device for memory, this process held ${humanBytes(a.before_first_segment_bytes)} there: ${
          a.before_first_segment_libraries_bytes == null ? 'its CUDA context as created, with whatever it had allocated before'
          : a.before_first_segment_libraries_bytes === 0 ? 'its CUDA context as created (no recorded call held memory yet)'
          : `${humanBytes(a.before_first_segment_libraries_bytes)} of it other libraries' (recorded calls), the rest its CUDA context as created`}.${a.context_bytes != null ? ` The CUDA context and unaccounted memory is ${humanBytes(a.context_bytes)} now; beyond the context as created it can hold the code of kernels loaded as they first ran, local memory, and memory allocated before the calls were recorded.` : ''}</p>` : ''}
        ${a.note ? `<p class="hint">${escapeHtml(a.note)}.</p>` : ''}`;
    }).join('')}`;
}

// Memory outside the allocator the recorded calls saw beyond the device bars: pinned host memory
// by library, devices without the driver's figures, or why the calls were not recorded.
function outsideMemoryHtml(outside, accounts) {
  if (!outside) return '';
  if (!outside.recorded) {
    return `<h2>Outside the allocator</h2><p class="hint">Not recorded: ${escapeHtml(outside.unrecorded_reason)}.</p>`;
  }
  const split = new Set((accounts || []).filter(a => a.libraries_bytes != null).map(a => a.device));
  const rows = [...(outside.device_libraries || []).filter(l => !split.has(l.device)),
    ...(outside.host_libraries || [])];
  const hostBytes = outside.pinned_host_bytes + outside.registered_host_bytes;
  if (!rows.length && !outside.managed_bytes) return '';
  return `<h2>Outside the allocator</h2>
    <p class="hint">Memory the process asked CUDA for beside the allocator, by the library that asked${hostBytes ? `; pinned host memory: ${humanBytes(hostBytes)} of the machine's RAM, locked for the GPU` : ''}.</p>
    <table class="data outside-memory"><thead><tr><th>where</th><th>library</th><th class="num">bytes</th><th class="num">allocations</th></tr></thead>
    <tbody>${rows.map(l => `<tr><td>${l.device < 0 ? 'pinned host' : `device ${l.device}`}</td>
      <td>${escapeHtml(l.library || '(library not known)')}</td><td class="num">${humanBytes(l.bytes)}</td><td class="num">${l.allocations}</td></tr>`).join('')}
    ${outside.managed_bytes ? `<tr><td>managed</td><td>cudaMallocManaged (on a device only where touched)</td><td class="num">${humanBytes(outside.managed_bytes)}</td><td></td></tr>` : ''}
    </tbody></table>`;
}

export async function renderStats(container, { snapshot }) {
  loading(container, 'statistics');
  const [stats, text] = await Promise.all([api.stats(snapshot.id), api.statsText(snapshot.id)]);
  const reserved = stats.reserved_bytes;
  const free = reserved - stats.allocated_bytes;
  const states = Object.entries(stats.state_bytes || {});
  const actions = Object.entries(stats.trace_actions || {});
  container.innerHTML = `
    <div class="cards">
      ${peakCards(stats, snapshot)}
      ${card('reserved', humanBytes(reserved), 'sum of all segments')}
      ${card('allocated', humanBytes(stats.allocated_bytes), `${percent(stats.allocated_bytes, reserved)} of reserved`)}
      ${card('active', humanBytes(stats.active_bytes), 'allocated plus freed-but-pending (stream use)')}
      ${card('reserved but free', humanBytes(free), `${percent(free, reserved)} of reserved`)}
      ${card('inactive split', humanBytes(stats.inactive_split_bytes), 'free bytes inside segments that also hold live blocks')}
      ${card('largest free block', humanBytes(stats.largest_free_block))}
      ${card('segments / blocks', `${stats.segments} / ${stats.blocks}`)}
      ${card('trace events', String(stats.trace_entries ?? 0))}
    </div>
    ${deviceMemoryHtml(stats.device_memory)}
    ${outsideMemoryHtml(stats.outside_memory, stats.device_memory)}
    <h2>By stream</h2>
    <table class="data"><thead><tr><th>device</th><th>stream</th><th class="num">segments</th><th class="num">blocks</th>
      <th class="num">reserved</th><th class="num">allocated</th><th class="num">active</th><th class="num">inactive split</th><th class="num">largest free</th></tr></thead>
    <tbody>${(stats.by_stream || []).map(s => `<tr><td>${s.device}</td><td>${hex(s.stream)}</td><td class="num">${s.segments}</td>
      <td class="num">${s.blocks}</td><td class="num">${humanBytes(s.reserved_bytes)}</td><td class="num">${humanBytes(s.allocated_bytes)}</td>
      <td class="num">${humanBytes(s.active_bytes)}</td><td class="num">${humanBytes(s.inactive_split_bytes)}</td>
      <td class="num">${humanBytes(s.largest_free_block)}</td></tr>`).join('')}</tbody></table>
    ${(stats.by_pool || []).length > 1 ? `<h2>By memory pool</h2>
    <p class="hint">A private pool (a CUDA graph's, a MemPool's) serves only its own graphs or scope: its free memory is out of reach of every other request.</p>
    <table class="data pools"><thead><tr><th>device</th><th>pool</th><th class="num">segments</th><th class="num">reserved</th><th class="num">allocated</th>
      <th class="num">active</th><th class="num">free cached</th></tr></thead>
    <tbody>${stats.by_pool.map(p => `<tr><td>${p.device}</td><td>${escapeHtml(p.name)}</td><td class="num">${p.segments}</td>
      <td class="num">${humanBytes(p.reserved_bytes)}</td><td class="num">${humanBytes(p.allocated_bytes)}</td><td class="num">${humanBytes(p.active_bytes)}</td>
      <td class="num">${humanBytes(Math.max(0, p.reserved_bytes - p.active_bytes))}</td></tr>`).join('')}</tbody></table>` : ''}
    <h2>By block state</h2>
    <table class="data"><thead><tr><th>state</th><th class="num">bytes</th><th class="num">blocks</th><th class="num">share</th></tr></thead>
    <tbody>${states.map(([state, bytes]) => `<tr><td>${escapeHtml(state)}</td><td class="num">${humanBytes(bytes)}</td>
      <td class="num">${stats.state_blocks?.[state] ?? ''}</td><td class="num">${percent(bytes, reserved)}</td></tr>`).join('')}</tbody></table>
    ${actions.length ? `<h2>Trace</h2><table class="data"><thead><tr><th>action</th><th class="num">events</th></tr></thead>
      <tbody>${actions.map(([a, n]) => `<tr><td>${escapeHtml(a)}</td><td class="num">${n}</td></tr>`).join('')}</tbody></table>` : ''}
    <h2>Growth by call site</h2><div class="growth"><div class="hint">Looking for memory that grows from step to step…</div></div>
    <h2>Allocator settings</h2>
    <div class="tune">${stats.trace_entries ? `<p class="hint">Used: ${escapeHtml(stats.allocator_config === '' ? "PyTorch's defaults" : stats.allocator_config ?? 'unreadable')}.
      memsnap can replay this run's trace exactly under every combination of expandable_segments, max_split_size_mb,
      roundup_power2_divisions and garbage_collection_threshold and say which reserves least.</p>
      <button class="action tune-button">Find better settings</button><div class="tune-result"></div>`
      : '<p class="hint">The snapshot has no trace to replay: record history at level \'all\' to compare settings.</p>'}</div>
    <h2>Summary</h2>
    <pre class="summary">${escapeHtml(text)}</pre>`;
  if (!stats.trace_entries) {
    // Growth is read from the trace's steps: without one there is nothing to ask the server.
    container.querySelector('.growth').innerHTML =
      '<p class="hint">Cannot judge whether memory grows: the snapshot has no trace (record history at level \'all\').</p>';
  } else {
    api.growth(snapshot.id).then(g => { container.querySelector('.growth').innerHTML = growthHtml(g); },
      error => { container.querySelector('.growth').innerHTML = `<p class="hint">${escapeHtml(error.message)}</p>`; });
  }
  container.querySelector('.tune-button')?.addEventListener('click', async (event) => {
    const result = container.querySelector('.tune-result');
    event.target.disabled = true;
    result.innerHTML = '<div class="hint">Replaying the trace under each setting…</div>';
    try {
      result.innerHTML = tuneHtml(await api.tune(snapshot.id));
    } catch (error) {
      result.innerHTML = `<div class="message error">${escapeHtml(error.message)}</div>`;
      event.target.disabled = false;
    }
  });
}

// The conclusion is the server's sentence (the CLI prints the same): growing sites, nothing
// grows, or why it cannot judge.
function growthHtml(g) {
  const steps = g.step_events.length;
  const headline = `<p class="growth-headline" data-verdict="${escapeHtml(g.verdict)}">${escapeHtml(g.conclusion)}</p>`;
  if (!g.live_bytes.length) return headline;
  const first = Math.min(g.first_compared_step, steps - 1);
  const before = g.before_trace_bytes[0] ? ` The trace begins mid-run: ${humanBytes(g.before_trace_bytes[0])} was live before its
    first event (counted in live memory, under no call site).` : '';
  const head = `<p class="hint">${counted(steps, 'step')}, from the ${escapeHtml(g.steps_from)}. Live memory at the start of step ${first + 1}:
    ${humanBytes(g.live_bytes[first])}; of step ${steps}: ${humanBytes(g.live_bytes[steps - 1])}.${before}</p>${headline}`;
  if (!g.sites.length) return head;
  const rows = g.sites.map(s => `<tr><td class="num">${humanBytes(Math.round(s.bytes_per_step))}</td><td class="num">${humanBytes(s.growth_bytes)}</td>
    <td class="num">${humanBytes(s.bytes[first])} → ${humanBytes(s.bytes[s.bytes.length - 1])}</td><td>${escapeHtml(s.label)}</td></tr>`).join('');
  return `${head}<table class="data growth-table"><thead><tr><th class="num">per step</th><th class="num">in all</th>
    <th class="num">step ${first + 1} → ${steps}</th><th>call site</th></tr></thead><tbody>${rows}</tbody></table>`;
}

// The headline is the server's sentence (the CLI prints the same): change, keep, no setting
// works, or why it cannot judge.
function tuneHtml(t) {
  const name = c => c === '' ? "PyTorch's defaults" : c;
  const head = escapeHtml(t.conclusion).replace(/PYTORCH_CUDA_ALLOC_CONF=\S+?(?=: peak)/, m => `<code>${m}</code>`);
  const rows = t.ranked.slice(0, 12).map((r, i) => `<tr${r.recorded ? ' class="recorded"' : ''}><td class="num">${i + 1}</td>
    <td>${escapeHtml(name(r.config))}${r.recorded ? ' (recorded)' : ''}</td><td class="num">${humanBytes(r.peak_reserved_bytes)}</td>
    <td class="num">${r.device_mallocs}</td><td class="num">${r.alloc_retries}</td><td>${r.ok ? 'yes' : 'no'}</td></tr>`).join('');
  return `<p class="tune-headline" data-verdict="${escapeHtml(t.verdict)}">${head}</p>
    <p class="hint">${t.settings_tried} settings replayed over ${t.events} events in ${t.seconds.toFixed(2)} s${t.note ? ` (${escapeHtml(t.note)})` : ''}.</p>
    <table class="data tune-table"><thead><tr><th class="num">rank</th><th>settings</th><th class="num">peak reserved</th>
      <th class="num">device mallocs</th><th class="num">retries</th><th>works</th></tr></thead><tbody>${rows}</tbody></table>`;
}
