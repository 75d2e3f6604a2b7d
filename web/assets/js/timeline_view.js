// Timeline: active memory over the trace's events, stacked by allocation (the largest have
// their own band, the rest merge into one grey band), as PyTorch's Active Memory Timeline.
// The server downsamples; dragging across the plot zooms into that range of events, for which
// the server picks the largest allocations again. Hover a band for its size, life and stack.
import { api } from './api.js';
import { fillBands } from './band_raster.js';
import { counted, escapeHtml, humanBytes, legendHtml, stableHash } from './format.js';
import { framesHtml, hideTooltip, loading, pinStacks, searchBox, prepareCanvas, redrawOnResize, showTooltip } from './ui.js';

const LEFT = 78, RIGHT = 12, TOP = 12, BOTTOM = 28, HEIGHT = 440;

// Bands stacked next to each other never share a colour: hues step by the golden angle in
// stacking order (an allocator reuses addresses, so colouring by address gave neighbours at
// the same address the same colour); the stack shades it a little.
const roleColours = ['hsl(215, 55%, 55%)', 'hsl(275, 45%, 60%)', 'hsl(35, 85%, 58%)', 'hsl(145, 45%, 52%)', 'hsl(0, 0%, 78%)'];
// The global pools grey-blue; each private pool its own warm colour.
const poolColours = ['hsl(210, 25%, 72%)', 'hsl(48, 75%, 58%)', 'hsl(15, 75%, 60%)', 'hsl(330, 55%, 62%)', 'hsl(95, 45%, 55%)', 'hsl(275, 45%, 62%)'];
// A stacked breakdown the server sent (by role or by pool), or null for bands.
const groupsOf = data => data.roles ? { names: data.roles, bytes: data.role_bytes, colours: roleColours }
  : data.pools ? { names: data.pools, bytes: data.pool_bytes, colours: poolColours } : null;

const bandColour = (band, index) => {
  const jitter = (stableHash(band.label || String(band.stack)) % 1000) / 1000;
  return `hsl(${(index * 137.508 + 20 * jitter) % 360}, ${50 + 15 * jitter}%, ${60 + 8 * (index % 2)}%)`;
};

function lowerBound(array, value, key = x => x) {
  let lo = 0, hi = array.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (key(array[mid]) < value) lo = mid + 1; else hi = mid; }
  return lo;
}

// The index of the last point of a flat outline [event, bottom, event, bottom, ...] whose event
// is before `event`, or -1.
function outlineBefore(outline, event) {
  let lo = 0, hi = outline.length >> 1;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (outline[2 * mid] < event) lo = mid + 1; else hi = mid; }
  return 2 * lo - 2;
}

function niceStep(max, count) {
  const raw = max / count, power = Math.pow(2, Math.floor(Math.log2(Math.max(raw, 1))));
  return [1, 2, 4, 8].map(m => m * power).find(s => s >= raw) || raw;
}

// A new view's state (windows: the zoom history, [begin, end] pairs), and what it asks the
// server for in a state.
const initialState = () => ({ device: undefined, windows: [], bands: 150, kind: 'active' });
function timelineParams(state) {
  const window = state.windows[state.windows.length - 1];
  const byRole = state.kind === 'roles', byPool = state.kind === 'pools';
  return { device: state.device, begin: window?.[0], end: window?.[1], bands: state.bands,
           kind: byRole || byPool ? 'active' : state.kind, roles: byRole ? 1 : undefined, pools: byPool ? 1 : undefined };
}

// Asks for what a new timeline of snapshot `id` shows first (api.ahead).
export const prefetchTimeline = id => api.ahead('timeline', id, timelineParams(initialState()));

export async function renderTimeline(container, { snapshot }) {
  const state = initialState();
  container.innerHTML = `
    <div class="toolbar">
      <span class="device-box"></span>
      <label title="Active memory by allocation (PyTorch's Active Memory Timeline), or reserved memory by segment and expandable mapping (its Active Cached Segment Timeline)">Memory
        <select class="kind" aria-label="Memory"><option value="active">active, by allocation</option><option value="roles">active, by role</option><option value="pools">active, by memory pool (incl. private pools)</option><option value="segments">reserved, by segment</option></select></label>
      <span class="role-legend"></span>
      <label title="How many allocations are drawn on their own; the rest share the grey band">Detail
        <select class="detail" aria-label="Detail">${[50, 150, 500, 2000].map(n => `<option ${n === 150 ? 'selected' : ''}>${n}</option>`).join('')}</select></label>
      <button class="action back" disabled>Zoom out</button>
      <button class="action reset" disabled>Reset zoom</button>
      <span class="summary hint"></span>
    </div>
    <div class="hint">Drag across the plot to zoom into a range of events.</div>
    <div class="plot canvas-box"></div>`;
  const plot = container.querySelector('.plot');
  let found = null;  // stacks matching the search: their bands stand out, the rest fade
  searchBox(container.querySelector('.toolbar'), q => api.search(snapshot.id, { q, device: state.device }), result => {
    found = result && result.stacks.length ? new Set(result.stacks) : null;
    draw();
  });
  container.querySelector('.detail').addEventListener('change', e => { state.bands = Number(e.target.value); load(); });
  container.querySelector('.kind').addEventListener('change', e => { state.kind = e.target.value; load(); });
  let data = null, canvas = null, brush = null, groups = null;

  const load = async () => {
    loading(plot, 'timeline');
    data = await api.timeline(snapshot.id, timelineParams(state));
    groups = groupsOf(data);
    container.querySelector('.role-legend').innerHTML = groups
      ? legendHtml(groups.names.map((name, r) => [groups.colours[r % groups.colours.length], name])) : '';
    plot.innerHTML = '<canvas tabindex="0" aria-label="Active memory timeline"></canvas>';
    canvas = plot.querySelector('canvas');
    attach();
    const box = container.querySelector('.device-box');
    if (data.devices.length > 1 && !box.firstChild) {
      box.innerHTML = `<label>Device <select aria-label="Device">${data.devices.map(d => `<option ${d === data.device ? 'selected' : ''}>${d}</option>`).join('')}</select></label>`;
      box.querySelector('select').addEventListener('change', e => { state.device = e.target.value; state.windows = []; load(); });
    }
    container.querySelector('.back').disabled = container.querySelector('.reset').disabled = state.windows.length === 0;
    const [begin, end] = data.window;
    const things = data.kind === 'segments' ? ['segment or mapping', 'segments and mappings'] : ['allocation', 'allocations'];
    // The axis counts allocations and frees; the peak is also named by the trace's own entry
    // number (Trace, Segments' "at event", the state API), linked to the segments right after it.
    container.querySelector('.summary').innerHTML = escapeHtml(`events ${begin}–${end} of ${data.events} · ${counted(data.allocations, ...things)} · ` +
      `${data.bands.length} drawn on their own · peak ${humanBytes(data.peak_bytes)} at event ${data.peak_event}, `) +
      `<a class="peak-link" href="#segments/${encodeURIComponent(snapshot.id)}/${data.peak_entry}" ` +
      `title="the segments right after this entry of the trace">trace entry ${data.peak_entry}</a>`;
    draw();
  };

  const geometry = () => {
    const width = Math.max(500, plot.clientWidth - 2);
    const [begin, end] = data.window;
    const top = Math.max(...data.total_bytes, 1) * 1.05;
    const x = e => LEFT + (width - LEFT - RIGHT) * (e - begin) / Math.max(end - begin, 1);
    const y = b => TOP + (HEIGHT - TOP - BOTTOM) * (1 - b / top);
    const eventAt = px => begin + (px - LEFT) / (width - LEFT - RIGHT) * Math.max(end - begin, 1);
    return { width, x, y, top, eventAt, byteAt: py => top * (1 - (py - TOP) / (HEIGHT - TOP - BOTTOM)) };
  };

  function draw() {
    if (!data || !canvas) return;
    const g = geometry();
    const context = prepareCanvas(canvas, g.width, HEIGHT);
    context.clearRect(0, 0, g.width, HEIGHT);
    // The bands first: their pixels are written, not painted over what is there.
    if (!groups) {
      fillBands(context, data.bands.map((band, index) => {
        const outline = band.outline, edges = new Float64Array(outline.length / 2 * 3);
        for (let i = 0, e = 0; i + 1 < outline.length; i += 2, e += 3) {
          edges[e] = g.x(outline[i]); edges[e + 1] = g.y(outline[i + 1]); edges[e + 2] = g.y(outline[i + 1] + band.size);
        }
        return { colour: bandColour(band, index), alpha: found && !found.has(band.stack) ? 0.15 : 1, edges };
      }), { left: LEFT, top: TOP, width: g.width - LEFT - RIGHT, height: HEIGHT - TOP - BOTTOM, ratio: window.devicePixelRatio || 1 });
    }
    // Merged small allocations at the bottom.
    context.fillStyle = 'rgb(205,205,205)';
    context.beginPath();
    context.moveTo(g.x(data.samples[0]), g.y(0));
    data.samples.forEach((s, i) => context.lineTo(g.x(s), g.y(data.other_bytes[i])));
    context.lineTo(g.x(data.samples[data.samples.length - 1]), g.y(0));
    context.fill();
    if (groups) {
      // Memory by role (parameters at the bottom) or by pool (global first): stacked areas.
      let below = data.samples.map(() => 0);
      groups.names.forEach((name, r) => {
        const above = below.map((b, i) => b + groups.bytes[i][r]);
        context.fillStyle = groups.colours[r % groups.colours.length];
        context.beginPath();
        data.samples.forEach((s, i) => (i ? context.lineTo : context.moveTo).call(context, g.x(s), g.y(above[i])));
        for (let i = data.samples.length - 1; i >= 0; --i) context.lineTo(g.x(data.samples[i]), g.y(below[i]));
        context.closePath();
        context.fill();
        below = above;
      });
    }
    // Axes: bytes on the left, events (and seconds) below.
    context.strokeStyle = '#999'; context.fillStyle = '#444'; context.lineWidth = 1;
    context.beginPath(); context.moveTo(LEFT, TOP); context.lineTo(LEFT, HEIGHT - BOTTOM); context.lineTo(g.width - RIGHT, HEIGHT - BOTTOM); context.stroke();
    const step = niceStep(g.top, 5);
    context.textAlign = 'right';
    for (let b = 0; b <= g.top; b += step) {
      context.fillText(humanBytes(b), LEFT - 6, g.y(b));
      context.strokeStyle = 'rgba(0,0,0,.06)'; context.beginPath(); context.moveTo(LEFT, g.y(b)); context.lineTo(g.width - RIGHT, g.y(b)); context.stroke();
    }
    context.textAlign = 'center';
    const [begin, end] = data.window;
    const t0 = data.time_us[0] ?? 0;
    for (let k = 0; k <= 6; ++k) {
      const event = Math.round(begin + (end - begin) * k / 6);
      const i = Math.min(lowerBound(data.samples, event), data.samples.length - 1);
      const seconds = ((data.time_us[i] ?? t0) - t0) / 1e6;
      context.fillText(`${event}${k === 0 ? '' : `  +${seconds.toFixed(seconds < 10 ? 2 : 1)}s`}`, Math.min(Math.max(g.x(event), LEFT + 20), g.width - 40), HEIGHT - BOTTOM + 14);
    }
    context.textAlign = 'left';
    // Out-of-memory errors across the plot; annotations as ticks on the event axis.
    // Each kind of line in one path: a long run's thousands of annotations stroke at once.
    for (const oom of [false, true]) {
      context.strokeStyle = oom ? 'rgba(192,28,40,.9)' : 'rgba(37,99,235,.8)';
      context.lineWidth = oom ? 2 : 1;
      context.beginPath();
      for (const marker of data.markers) {
        if ((marker.kind === 'oom') !== oom) continue;
        const x = g.x(marker.event);
        context.moveTo(x, oom ? TOP : HEIGHT - BOTTOM - 7); context.lineTo(x, HEIGHT - BOTTOM);
      }
      context.stroke();
    }
    context.lineWidth = 1;
    for (const marker of data.markers) {
      const x = g.x(marker.event), oom = marker.kind === 'oom';
      if (oom || data.markers.length <= 12) {
        context.fillStyle = oom ? 'rgb(192,28,40)' : 'rgb(37,99,235)';
        context.save(); context.translate(x + 3, oom ? TOP + 4 : HEIGHT - BOTTOM - 60); context.rotate(Math.PI / 2);
        context.fillText(oom ? marker.label : `${marker.kind === 'END' ? '◂ ' : '▸ '}${marker.label}`.slice(0, 40), 0, 0);
        context.restore();
      }
    }
    // Peak marker.
    if (data.peak_event >= begin && data.peak_event <= end) {
      context.strokeStyle = 'rgba(194,65,12,.8)'; context.setLineDash([4, 3]);
      context.beginPath(); context.moveTo(LEFT, g.y(data.peak_bytes)); context.lineTo(g.width - RIGHT, g.y(data.peak_bytes)); context.stroke();
      context.setLineDash([]);
      context.fillStyle = 'rgb(194,65,12)';
      context.fillText(`peak ${humanBytes(data.peak_bytes)}`, LEFT + 6, g.y(data.peak_bytes) - 8);
    }
    if (brush) {
      context.fillStyle = 'rgba(37,99,235,.15)';
      context.fillRect(Math.min(brush.x0, brush.x1), TOP, Math.abs(brush.x1 - brush.x0), HEIGHT - TOP - BOTTOM);
    }
  }

  // The band (or the merged band) under the pointer.
  const hitTest = (px, py) => {
    const g = geometry();
    const event = g.eventAt(px), bytes = g.byteAt(py);
    if (px < LEFT || event < data.window[0] || event > data.window[1] || bytes < 0) return null;
    const i = Math.max(0, Math.min(lowerBound(data.samples, event + 1) - 1, data.samples.length - 1));
    const sample = data.samples[i];
    for (const band of data.bands) {
      const p = outlineBefore(band.outline, sample + 1);
      if (p < 0 || band.outline[p] < band.start || sample >= band.end && band.end !== data.events) continue;
      const bottom = band.outline[p + 1];
      if (bytes >= bottom && bytes < bottom + band.size) return { band };
    }
    if (bytes < data.other_bytes[i]) return { other: data.other_bytes[i], sample };
    return null;
  };

  let hovered = null, lastPointerY = 0;
  const pinBand = async (band) => {
    try {
      const stack = await api.stack(snapshot.id, band.stack);
      hideTooltip();
      pinStacks(`<span class="title">${humanBytes(band.size)} at 0x${band.address.toString(16)}, events ${band.before_trace ? 'before the trace' : band.start}–${band.end === data.events ? 'the end' : band.end}</span>`,
        [{ caption: 'allocated by', frames: stack.frames }]);
    } catch (error) { /* the hover still shows what is known */ }
  };
  const attach = () => {
    canvas.addEventListener('mousedown', e => {
      const rect = canvas.getBoundingClientRect();
      lastPointerY = e.clientY - rect.top;
      brush = { x0: e.clientX - rect.left, x1: e.clientX - rect.left };
      hideTooltip();
    });
    canvas.addEventListener('mousemove', async e => {
      const rect = canvas.getBoundingClientRect();
      const px = e.clientX - rect.left, py = e.clientY - rect.top;
      lastPointerY = py;
      if (brush) { brush.x1 = px; draw(); return; }
      if (groups) {  // the breakdown at the event under the pointer
        const g = geometry(), event = g.eventAt(px);
        if (px < LEFT || event < data.window[0] || event > data.window[1]) { hideTooltip(); return; }
        const i = Math.max(0, Math.min(lowerBound(data.samples, event + 1) - 1, data.samples.length - 1));
        const rows = groups.names.map((name, r) => `<div><span class="k">${escapeHtml(name)}</span> ${humanBytes(groups.bytes[i][r])}</div>`).join('');
        showTooltip(e, `<div class="title">At event ${data.samples[i]}</div>${rows}`);
        return;
      }
      const hit = hitTest(px, py);
      if (!hit) { hovered = null; hideTooltip(); return; }
      if (hit.other !== undefined) {
        hovered = null;
        showTooltip(e, `<div class="title">${humanBytes(hit.other)} in allocations without a band of their own</div>
          <div>at event ${hit.sample}: raise Detail, or drag to zoom in, to draw them one by one</div>`);
        return;
      }
      const band = hit.band;
      const head = `<div class="title">${humanBytes(band.size)} · ${escapeHtml(band.label || 'no stack')}</div>
        <div><span class="k">address</span> 0x${band.address.toString(16)} · <span class="k">alive</span> events ${band.before_trace ? 'before the trace' : band.start}–${band.end === data.events ? 'the end' : band.end}</div>`;
      if (hovered === band) { showTooltip(e, document.getElementById('tooltip').innerHTML); return; }
      hovered = band;
      showTooltip(e, head);
      if (band.stack < 0) return;
      try {
        const stack = await api.stack(snapshot.id, band.stack);
        if (hovered === band) showTooltip(e, head + framesHtml(stack.frames, 30));
      } catch (error) { /* the head is shown; the stack is a bonus */ }
    });
    const finish = () => {
      if (!brush) return;
      const { x0, x1 } = brush;
      brush = null;
      if (Math.abs(x1 - x0) < 6) {  // a click, not a drag: pin the band's stack
        draw();
        const hit = hitTest(x0, lastPointerY);
        if (hit?.band && hit.band.stack >= 0) pinBand(hit.band);
        return;
      }
      const g = geometry();
      const begin = Math.max(data.window[0], Math.floor(g.eventAt(Math.min(x0, x1))));
      const end = Math.min(data.window[1], Math.ceil(g.eventAt(Math.max(x0, x1))));
      if (end - begin < 2) { draw(); return; }
      state.windows.push([begin, end]);
      load();
    };
    canvas.addEventListener('mouseup', finish);
    canvas.addEventListener('mouseleave', () => { hovered = null; hideTooltip(); finish(); });
  };

  container.querySelector('.back').addEventListener('click', () => { state.windows.pop(); load(); });
  container.querySelector('.reset').addEventListener('click', () => { state.windows = []; load(); });
  redrawOnResize(container, draw);
  await load();
}
