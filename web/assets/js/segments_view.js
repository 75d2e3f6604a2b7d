// Segments: every segment a bar of its blocks, lowest address on the left, coloured by state
// (or allocated blocks by call site, as the Timeline colours its bands), bar length
// proportional to the segment's size. Only the rows in sight are drawn, so 100,000
// blocks stay responsive. Hover a block for its stack and the history of its bytes; click to
// pin it. "At event" shows the segments as they were right after any event of the trace
// (rebuilt by the server's replay; the slider and the arrow keys step through events).
import { api } from './api.js';
import { counted, escapeHtml, hex, humanBytes, legendHtml, percent, siteColour, stableHash, stateColours } from './format.js';
import { framesHtml, hideTooltip, loading, pinStacks, searchBox, prepareCanvas, redrawOnResize, showTooltip } from './ui.js';

const ROW = 20, LABEL = 250;
const stateNames = ['active_allocated', 'active_pending_free', 'inactive'];

const allocatedShades = new Map();  // by stack: 100,000 blocks share a few hundred stacks
// A block's colour: by its state, an allocated block a shade of orange by its stack; or, with
// `sites` (stack -> call site), an allocated block in its call site's colour, as the Timeline
// draws it.
function blockColour(state, stack, sites = null) {
  if (state !== 0) return stateColours[stateNames[state]];
  if (sites) return siteColour(sites[stack] || '');
  let shade = allocatedShades.get(stack);
  if (!shade) {
    const jitter = (stableHash(String(stack)) % 1000) / 1000;  // neighbours differ, a stack keeps its shade
    shade = `hsl(${8 + 36 * jitter}, 80%, ${55 + 12 * jitter}%)`;
    allocatedShades.set(stack, shade);
  }
  return shade;
}

const poolKey = s => (s.pool ? `${s.pool[0]},${s.pool[1]}` : '0,0');
const sorts = {
  address: (a, b) => a.device - b.device || a.address - b.address,
  pool: (a, b) => a.device - b.device || (a.pool_name === 'global') - (b.pool_name === 'global') ||
    poolKey(a).localeCompare(poolKey(b)) || a.address - b.address,
  size: (a, b) => b.total_size - a.total_size || a.address - b.address,
  free: (a, b) => (b.total_size - b.allocated_size) - (a.total_size - a.allocated_size) || a.address - b.address,
};

// Asks for what the segments of snapshot `id` show first (api.ahead).
export const prefetchSegments = id => api.ahead('segments', id);

export async function renderSegments(container, { snapshot, atEntry = null }) {
  loading(container, 'segments');
  let data = await api.segments(snapshot.id);
  const final = data;
  const devices = [...new Set(data.segments.map(s => s.device))];
  // Private pools (CUDA graphs, MemPool): each can be shown alone, and segments grouped by pool.
  const pools = [...new Map(data.segments.map(s => [poolKey(s), s.pool_name || 'global'])).entries()];
  const privatePools = pools.length > 1;
  // Events of the device the "At event" control steps through (the first with a trace).
  const traced = (snapshot.devices || []).find(d => d.events > 0);
  const at = { device: traced?.device ?? 0, events: traced?.events ?? 0, event: null, pending: 0 };
  container.innerHTML = `
    <div class="toolbar">
      ${devices.length > 1 ? `<label>Device <select class="device" aria-label="Device"><option value="">all</option>
        ${devices.map(d => `<option>${d}</option>`).join('')}</select></label>` : ''}
      ${privatePools ? `<label>Pool <select class="pool" aria-label="Pool"><option value="">all</option>
        ${pools.map(([key, name]) => `<option value="${key}">${escapeHtml(name)}</option>`).join('')}</select></label>` : ''}
      <label>Order <select class="order" aria-label="Order">
        ${privatePools ? '<option value="pool">by pool</option>' : ''}
        <option value="address">by address</option><option value="size">largest first</option><option value="free">most free first</option></select></label>
      <label>Bars <select class="scale" aria-label="Bar length">
        <option value="proportional">proportional to size</option><option value="full">each full width</option></select></label>
      <label title="Allocated blocks in one colour by state, or each in its call site's colour, as the Timeline draws its bands">Colour
        <select class="colour" aria-label="Colour"><option value="state">by state</option><option value="site">by call site</option></select></label>
      <span class="hint counts">${counted(data.segments.length, 'segment')} · ${counted(data.blocks, 'block')}</span>
      <span class="state-legend"></span>
    </div>
    ${at.events > 0 ? `<div class="toolbar at-event-bar">
      <label title="The segments right after this event of device ${at.device}'s trace">At event
        <input type="range" class="at-event" min="0" max="${at.events - 1}" value="${at.events - 1}" aria-label="At event"></label>
      <input type="number" class="at-event-number" min="0" max="${at.events - 1}" value="${at.events - 1}" aria-label="Event number">
      <button class="action final-state" disabled>Final state</button>
      <span class="state-summary hint">the snapshot's final state</span></div>` : ''}
    <div class="canvas-box scroll-box"><canvas tabindex="0" aria-label="Segments"></canvas><div class="spacer"></div></div>`;
  if (!data.segments.length) { container.querySelector('.canvas-box').outerHTML = '<div class="empty">No segments in this snapshot.</div>'; return; }
  const box = container.querySelector('.scroll-box');
  const canvas = box.querySelector('canvas');
  const spacer = box.querySelector('.spacer');
  let rows = [];
  const largest = Math.max(...data.segments.map(s => s.total_size));
  // Search: blocks of the matching stacks stand out, the rest fade; an address's block is outlined.
  let found = null;
  searchBox(container.querySelector('.toolbar'), q => api.search(snapshot.id, { q }), result => {
    found = result && { stacks: new Set(result.stacks), block: result.block };
    if (found?.block && at.event === null) {
      const row = rows.findIndex(s => s.index === found.block.segment);
      if (row >= 0) box.scrollTop = Math.max(0, row * ROW - 3 * ROW);
    }
    draw();
  });

  // By call site: allocated blocks in their sites' colours (the sites of the state shown).
  const sitesShown = () => container.querySelector('.colour').value === 'site' ? data.sites || {} : null;
  const arrange = () => {
    container.querySelector('.state-legend').innerHTML = legendHtml([
      ...(sitesShown() ? [] : [[blockColour(0, 0), 'allocated']]),
      [stateColours.active_pending_free, 'freed, pending stream use'], [stateColours.inactive, 'free (cached)']]) +
      (sitesShown() ? '<span class="hint">allocated: each call site in its Timeline colour</span>' : '');
    const device = container.querySelector('.device')?.value ?? '';
    const pool = container.querySelector('.pool')?.value ?? '';
    rows = data.segments.filter(s => (device === '' || String(s.device) === device) && (pool === '' || poolKey(s) === pool));
    rows.sort(sorts[container.querySelector('.order').value]);
    draw();
  };

  // Pixels per byte of a segment's bar.
  const barScale = (segment, barWidth) => container.querySelector('.scale').value === 'full'
    ? barWidth / segment.total_size : Math.max(barWidth * segment.total_size / largest, 2) / segment.total_size;

  const geometry = () => {
    const width = Math.max(500, box.clientWidth - 2);
    const room = window.innerHeight - box.getBoundingClientRect().top - 24;
    const height = Math.min(Math.max(room, 240), rows.length * ROW + 4);
    return { width, height, barWidth: width - LABEL - 10 };
  };

  function draw() {
    const { width, height, barWidth } = geometry();
    const sites = sitesShown();
    spacer.style.height = `${Math.max(0, rows.length * ROW + 4 - height)}px`;
    const context = prepareCanvas(canvas, width, height);
    const first = Math.floor(box.scrollTop / ROW), shift = box.scrollTop - first * ROW;
    context.clearRect(0, 0, width, height);
    for (let r = first; r < rows.length && (r - first) * ROW - shift < height; ++r) {
      const s = rows[r], y = (r - first) * ROW - shift;
      context.fillStyle = '#333';
      const kind = s.pool_name && s.pool_name !== 'global' ? s.pool_name.replace('CUDA graph pool', 'graph') : s.segment_type;
      context.fillText(`${s.device}  ${hex(s.address)}  ${humanBytes(s.total_size)}  ${kind}`, 6, y + ROW / 2);
      const scale = barScale(s, barWidth);
      s.blocks.forEach(([offset, size, , state, stack, , lastHolder], b) => {
        const faded = found && found.stacks.size > 0 && !found.stacks.has(stack) && !found.stacks.has(lastHolder);
        context.globalAlpha = faded ? 0.18 : 1;
        context.fillStyle = blockColour(state, stack, sites);
        const w = size * scale;
        context.fillRect(LABEL + offset * scale, y + 2, Math.max(w - (w > 4 ? 1 : 0), 0.6), ROW - 4);
        context.globalAlpha = 1;
        if (found?.block && at.event === null && found.block.segment === s.index && found.block.block === b) {
          context.strokeStyle = '#111'; context.lineWidth = 2;
          context.strokeRect(LABEL + offset * scale, y + 1, Math.max(w, 3), ROW - 2);
          context.lineWidth = 1;
        }
      });
    }
  }

  const hitTest = (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, y = event.clientY - rect.top + box.scrollTop;
    const segment = rows[Math.floor(y / ROW)];
    if (!segment) return null;
    if (x < LABEL) return { segment };
    const scale = barScale(segment, geometry().barWidth);
    const offset = (x - LABEL) / scale;
    const blocks = segment.blocks;
    let lo = 0, hi = blocks.length - 1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (blocks[mid][0] <= offset) lo = mid; else hi = mid - 1; }
    const block = blocks[lo];
    if (!block || offset < block[0] || offset >= block[0] + block[1]) return { segment };
    return { segment, block, index: lo };
  };

  // A block's frames and history: the snapshot's own, or at an event the allocation that held
  // (or, for free bytes, last held) it.
  const blockDetail = async (segment, index) => {
    if (at.event === null) return api.block(snapshot.id, segment.index, index);
    const [offset, size, , state, stack, , lastHolder] = segment.blocks[index];
    const frames = stack >= 0 ? (await api.stack(snapshot.id, stack)).frames : [];
    const history = state === 2 && lastHolder >= 0
      ? [{ address: segment.address + offset, size, frames: (await api.stack(snapshot.id, lastHolder)).frames }] : [];
    return { frames, history };
  };

  let hovered = '';
  canvas.addEventListener('mousemove', async (event) => {
    const hit = hitTest(event);
    if (!hit) { hideTooltip(); hovered = ''; return; }
    const { segment, block, index } = hit;
    const head = `<div><span class="k">segment</span> ${hex(segment.address)} · ${humanBytes(segment.total_size)} · ${escapeHtml(segment.segment_type)} pool${segment.pool_name && segment.pool_name !== 'global' ? ` · ${escapeHtml(segment.pool_name)}` : ''} · stream ${hex(segment.stream)}${segment.is_expandable ? ' · expandable' : ''}</div>
      <div><span class="k">allocated</span> ${humanBytes(segment.allocated_size)} (${percent(segment.allocated_size, segment.total_size)})</div>`;
    if (!block) {
      hovered = `s${segment.index}`;
      showTooltip(event, `<div class="title">Segment on device ${segment.device}</div>${head}`);
      return;
    }
    const key = `${segment.index}/${index}`;
    const [offset, size, requested, state] = block;
    const title = `<div class="title">${humanBytes(size)} ${stateNames[state].replace(/_/g, ' ')}</div>
      <div><span class="k">address</span> ${hex(segment.address + offset)}${state === 2 ? '' : ` · <span class="k">requested</span> ${humanBytes(requested)}`}</div>${head}`;
    if (hovered !== key) showTooltip(event, title + '<div class="frames">…</div>');
    else showTooltip(event, document.getElementById('tooltip').innerHTML);
    if (hovered === key) return;
    hovered = key;
    try {
      const detail = await blockDetail(segment, index);
      if (hovered !== key) return;
      let history = '';
      if (detail.history.length) {
        history = `<div class="k" style="margin-top:6px">history of these bytes (newest last):</div>` + detail.history.slice(-4).map(h =>
          `<div>${hex(h.address)} · ${humanBytes(h.size)}</div>${framesHtml(h.frames, 6)}`).join('');
      }
      showTooltip(event, title + framesHtml(detail.frames, 30) + history);
    } catch (error) {
      if (hovered === key) showTooltip(event, title + `<div>${escapeHtml(error.message)}</div>`);
    }
  });
  canvas.addEventListener('mouseleave', () => { hovered = ''; hideTooltip(); });

  // At event: the state after an event of the trace, from the server's replay.
  const showState = async (event) => {
    const mine = ++at.pending;
    if (event === null) {
      at.event = null;
      data = final;
    } else {
      const state = await api.state(snapshot.id, { event, device: at.device });
      if (mine !== at.pending) return;  // a later request superseded this one
      at.event = event;
      data = state;
    }
    container.querySelector('.counts').textContent = `${counted(data.segments.length, 'segment')} · ${counted(data.blocks, 'block')}`;
    container.querySelector('.final-state').disabled = event === null;
    container.querySelector('.state-summary').textContent = event === null ? "the snapshot's final state"
      : `after ${data.action} ${humanBytes(data.size)}${data.action === 'oom' ? '' : ` at ${hex(data.address)}`} · reserved ${humanBytes(data.reserved_bytes)} · allocated ${humanBytes(data.allocated_bytes)}${data.exact ? '' : ' · replayed inexactly'}`;
    hovered = '';
    arrange();
  };
  const slider = container.querySelector('.at-event');
  const number = container.querySelector('.at-event-number');
  if (slider) {
    let timer = 0;
    const choose = (value, now) => {
      const event = Math.max(0, Math.min(at.events - 1, Math.round(Number(value))));
      slider.value = number.value = event;
      clearTimeout(timer);
      timer = setTimeout(() => showState(event).catch(error => { container.querySelector('.state-summary').textContent = error.message; }), now ? 0 : 120);
    };
    slider.addEventListener('input', () => choose(slider.value, false));
    number.addEventListener('change', () => choose(number.value, true));
    container.querySelector('.final-state').addEventListener('click', () => {
      clearTimeout(timer);  // a step still waiting must not land after this
      slider.value = number.value = at.events - 1;
      showState(null);
    });
  }
  // Opened at a trace entry (#segments/ID/ENTRY, the timeline's peak link): that state.
  if (slider && atEntry !== null && atEntry < at.events) {
    slider.value = number.value = atEntry;
    showState(atEntry).catch(error => { container.querySelector('.state-summary').textContent = error.message; });
  }
  // A click pins the block's stack (and the history of its bytes) in a panel that stays.
  canvas.addEventListener('click', async (event) => {
    const hit = hitTest(event);
    if (!hit?.block) return;
    const { segment, block, index } = hit;
    const [offset, size, , state] = block;
    try {
      const detail = await blockDetail(segment, index);
      hideTooltip();
      pinStacks(`<span class="title">${humanBytes(size)} ${stateNames[state].replace(/_/g, ' ')} at ${hex(segment.address + offset)}</span>`,
        [{ caption: 'allocated by', frames: detail.frames },
         ...detail.history.slice().reverse().map(h => ({ caption: `earlier in these bytes: ${hex(h.address)} · ${humanBytes(h.size)}`, frames: h.frames }))]);
    } catch (error) { /* the hover still shows what is known */ }
  });
  box.addEventListener('scroll', () => requestAnimationFrame(draw));
  container.querySelectorAll('select').forEach(s => s.addEventListener('change', arrange));
  redrawOnResize(container, draw);
  arrange();
}
