// OOM: why the snapshot's out-of-memory error happened, in the words `memsnap explain-oom`
// uses: the request, the cause and its reasons, a bar of where the device's memory was, the
// stacks holding the most, and which settings a replay of the trace shows would have avoided it.
import { api } from './api.js';
import { counted, escapeHtml, hex, humanBytes, legendHtml, percent } from './format.js';
import { loading } from './ui.js';

const causeTitles = {
  fragmentation: 'Fragmentation: free memory existed, but no cached block was large enough',
  other_streams: 'Memory held by other streams',
  exhaustion: 'Too much live memory: the live tensors and the request exceed all the process could have',
  cannot_judge: 'Cannot judge whether the program needs less memory here',
  request_too_large: 'The request alone is larger than the device could ever give',
  private_pools: 'Private pools (CUDA graphs, MemPool) held the memory free, out of this request\'s reach',
  other_libraries: 'Other libraries of this process held the memory the request needed',
};

// Where the device's bytes were at the error, left to right, and the colour of each.
function memoryParts(x) {
  const cachedElsewhere = x.other_stream_free_bytes + x.other_pool_free_bytes;
  const parts = [
    ['allocated (live)', x.allocated_bytes, 'hsl(20, 80%, 60%)'],
    ['freed, waiting for streams', x.pending_free_bytes, 'hsl(285, 55%, 65%)'],
    ['cached, usable by the request', x.usable_free_bytes, 'hsl(140, 45%, 58%)'],
    ['cached on other streams / pool', cachedElsewhere, 'hsl(205, 45%, 70%)'],
    ['cached in private pools (CUDA graphs, MemPool)', x.private_pool_free_bytes || 0, 'hsl(48, 70%, 62%)'],
    ['cached, rest', Math.max(0, x.free_bytes - x.usable_free_bytes - cachedElsewhere - (x.private_pool_free_bytes || 0)), 'hsl(205, 20%, 84%)'],
  ];
  if (showsDeviceFree(x)) parts.push(['device free (not reserved)', x.device_free_bytes, 'hsl(0, 0%, 93%)']);
  if (showsOutside(x)) {
    // The libraries the recorded calls name, then the rest (CUDA context, other processes).
    const libraries = (x.outside_libraries || []).filter(l => l.bytes > 0);
    const named = libraries.reduce((sum, l) => sum + l.bytes, 0);
    libraries.forEach((l, i) => parts.push([`${l.library || 'a library not known'} (outside the allocator)`, l.bytes,
      `hsl(${(150 + 37 * i) % 360}, 40%, ${52 + (i % 3) * 8}%)`]));
    parts.push([libraries.length ? 'the rest outside the allocator (CUDA context, other processes)' : 'in use outside the allocator',
      Math.max(0, x.outside_allocator_bytes - named), 'hsl(0, 0%, 55%)']);
  }
  return parts.filter(([, bytes]) => bytes > 0);
}

// Under a memory cap the device's free bytes and what lies outside the allocator did not decide.
const capped = x => x.cap != null || x.cap_at_least_bytes != null;

// Memory outside the allocator (CUDA context, other libraries, other processes) is drawn where
// the device was full and it is not so large that it would squash the allocator's part.
const showsOutside = x => x.outside_allocator_bytes != null && !capped(x) &&
  (x.cause === 'other_libraries' || x.outside_allocator_bytes <= 4 * Math.max(x.reserved_bytes, 1));

// The device's free bytes belong in the bar when they decided the error; under a memory cap
// they are usually far larger than everything else and would squash it to a sliver.
// When other libraries held the memory, the whole device is the picture.
const showsDeviceFree = x => x.device_free_bytes !== null && !capped(x) &&
  (x.cause === 'other_libraries' || x.device_free_bytes <= 4 * x.reserved_bytes);

function memoryBar(x) {
  const parts = memoryParts(x);
  const total = parts.reduce((sum, [, bytes]) => sum + bytes, 0) || 1;
  const segments = parts.map(([name, bytes, colour]) =>
    `<div class="part" style="width:${(100 * bytes / total).toFixed(3)}%;background:${colour}"
          title="${escapeHtml(name)}: ${humanBytes(bytes)} (${percent(bytes, total)})"></div>`).join('');
  const requestWidth = Math.min(100, 100 * x.segment_bytes / total);
  return `
    <div class="oom-bar" role="img" aria-label="memory at the error">${segments}</div>
    <div class="oom-request" style="width:${requestWidth.toFixed(3)}%" title="the new segment the request needed">
      needed: ${humanBytes(x.segment_bytes)}</div>
    ${legendHtml(parts.map(([name, bytes, colour]) => [colour, `${name} ${humanBytes(bytes)}`]))}
    ${x.device_free_bytes !== null && !showsDeviceFree(x)
      ? `<p class="hint">Not drawn: the device's ${humanBytes(x.device_free_bytes)} still free; the bar is what the allocator had reserved.</p>` : ''}
    ${x.outside_allocator_bytes != null && !showsOutside(x) && !capped(x)
      ? `<p class="hint">Not drawn: ${humanBytes(x.outside_allocator_bytes)} in use outside the allocator.</p>` : ''}`;
}

const row = (name, bytes, note = '') =>
  `<tr><td>${escapeHtml(name)}</td><td class="num">${humanBytes(bytes)}</td><td class="hint">${escapeHtml(note)}</td></tr>`;

function memoryTable(x) {
  return `<table class="data oom-memory"><tbody>
    ${x.device_total_bytes != null ? row('device total', x.device_total_bytes) : ''}
    ${x.device_free_bytes !== null ? row('device free', x.device_free_bytes, 'what the device had left to reserve') : ''}
    ${x.cap ? row('memory cap', x.cap.bytes, `set by ${x.cap.source}`) : ''}
    ${x.outside_allocator_bytes != null ? row('in use outside the allocator', x.outside_allocator_bytes,
      "this process's CUDA context, other libraries' memory, other processes") : ''}
    ${(x.outside_libraries || []).map(l => row(`  ${l.library || '(library not known)'}`, l.bytes,
      (l.frames || [])[0] || counted(l.allocations, 'allocation'))).join('')}
    ${x.outside_unknown_reason ? row('other libraries', 0, `cannot say: ${x.outside_unknown_reason}`).replace(/<td class="num">[^<]*<\/td>/, '<td class="num"></td>') : ''}
    ${row('reserved', x.reserved_bytes, 'segments the allocator held')}
    ${row('allocated', x.allocated_bytes, counted(x.allocated_blocks, 'live block'))}
    ${row('freed, waiting for other streams', x.pending_free_bytes)}
    ${row('cached free', x.free_bytes, counted(x.free_blocks, 'block'))}
    ${row('usable by this request', x.usable_free_bytes, `largest block ${humanBytes(x.usable_largest_free_bytes)}`)}
    ${row('cached on other streams', x.other_stream_free_bytes)}
    ${row('cached in the other pool', x.other_pool_free_bytes)}
    ${x.private_pool_free_bytes ? row('cached in private pools', x.private_pool_free_bytes,
      (x.private_pools_free || []).map(p => `${p.name} ${humanBytes(p.free_bytes)}`).join(', ')) : ''}
    ${row('inactive split', x.inactive_split_bytes, 'free bytes in segments that also hold live blocks')}
    ${x.blocked_by_split_rules_bytes ? row('too large to split', x.blocked_by_split_rules_bytes, 'free blocks max_split_size_mb forbids splitting') : ''}
  </tbody></table>`;
}

function holdersTable(x) {
  if (!x.holders.length) return '<p class="hint">No live blocks with a recorded stack.</p>';
  return `<table class="data"><thead><tr><th class="num">bytes</th><th class="num">blocks</th><th class="num">share</th><th>allocated at</th></tr></thead>
    <tbody>${x.holders.map(h => `<tr><td class="num">${humanBytes(h.bytes)}</td><td class="num">${h.blocks}</td>
      <td class="num">${percent(h.bytes, x.allocated_bytes)}</td>
      <td class="frame">${h.frames.length ? h.frames.map(escapeHtml).join('<br>') : '(no stack recorded)'}</td></tr>`).join('')}</tbody></table>`;
}

// The replays' device, the table, and what they conclude: memsnap tune's verdict on the same
// snapshot, the sentence the CLI prints.
function settingsTable(x) {
  const note = x.settings_note ? `<p class="hint">${escapeHtml(x.settings_note)}</p>` : '';
  const shared = x.shared_graph_pool_conclusion ? `<p>${escapeHtml(x.shared_graph_pool_conclusion)}</p>` : '';
  if (!x.settings.length) return note + shared;
  const device = `<p class="hint">Each replay ran on a simulated device of ${humanBytes(x.replay_capacity_bytes)}${
    x.cap_at_least_bytes != null ? `: the lowest the memory cap can have been (it lay between ${humanBytes(x.cap_at_least_bytes)}
    and ${humanBytes(x.cap_below_bytes)})` : ''}${x.cap ? `, under the recorded memory cap of ${humanBytes(x.cap.bytes)}` : ''}.</p>`;
  return `${device}<table class="data oom-settings"><thead><tr><th>settings</th><th>outcome</th><th class="num">peak reserved</th>
      <th class="num">segment allocations</th></tr></thead>
    <tbody>${x.settings.map(s => `<tr class="${s.avoided ? 'avoided' : 'failed'}">
      <td><code>${escapeHtml(s.config || '(PyTorch defaults)')}</code>${s.recorded ? ' <span class="hint">recorded</span>' : ''}</td>
      <td>${s.avoided ? '✓ avoids the error' : '✗ still runs out'}</td>
      <td class="num">${humanBytes(s.peak_reserved_bytes)}</td><td class="num">${s.segment_allocs}</td></tr>`).join('')}</tbody></table>
    <p class="oom-settings-conclusion" data-verdict="${escapeHtml(x.settings_verdict ? x.settings_verdict.answer : '')}">${
      escapeHtml(x.settings_conclusion)}</p>${note}${shared}`;
}

export async function renderOom(container, { snapshot }) {
  if (!snapshot.has_oom) {
    container.innerHTML = '<div class="empty">This snapshot holds no out-of-memory error.</div>';
    return;
  }
  const draw = async device => {
    loading(container, 'the out-of-memory analysis (replaying the trace under other settings)');
    const x = await api.oom(snapshot.id, device === undefined ? {} : { device });
    const devices = x.oom_devices.length > 1
      ? `<label>device <select class="oom-device">${x.oom_devices.map(d =>
          `<option value="${d}"${d === x.device ? ' selected' : ''}>${d}</option>`).join('')}</select></label>` : '';
    container.innerHTML = `
      <div class="toolbar">${devices}<span class="hint">as <code>memsnap explain-oom</code> says it</span></div>
      <div class="oom-headline ${escapeHtml(x.cause)}">
        <div class="cause">${escapeHtml(causeTitles[x.cause] || x.cause)}</div>
        <div>Device ${x.device}, ${(x.time_us / 1e6).toFixed(3)} s into the trace: a request for <b>${humanBytes(x.requested_bytes)}</b>
          (rounded to ${humanBytes(x.rounded_bytes)}, ${escapeHtml(x.pool)} pool, stream ${hex(x.stream)}) needed a new
          ${humanBytes(x.segment_bytes)} segment.</div>
      </div>
      <ul class="oom-reasons">${x.reasons.map(r => `<li>${escapeHtml(r)}</li>`).join('')}</ul>
      ${x.events_after_oom ? `<p class="hint">${x.state_rebuilt
        ? `The state below is the one at the error, rebuilt by replaying the trace (the snapshot was taken ${counted(x.events_after_oom, 'event')} later).`
        : `The state below is the snapshot's, ${counted(x.events_after_oom, 'event')} after the error.`}</p>` : ''}
      <h2>Memory at the error</h2>
      ${memoryBar(x)}
      <div class="oom-columns">
        <div>${memoryTable(x)}</div>
        <div><h2 class="inline">Requested at</h2>
          <div class="frames-box">${x.request_frames.length ? x.request_frames.map(escapeHtml).join('\n') : '(no stack recorded)'}</div></div>
      </div>
      <h2>Would other settings have avoided it?</h2>
      ${settingsTable(x)}
      <h2>Largest holders of memory</h2>
      ${holdersTable(x)}`;
    container.querySelector('.oom-device')?.addEventListener('change', e => draw(Number(e.target.value)));
  };
  await draw(undefined);
}
