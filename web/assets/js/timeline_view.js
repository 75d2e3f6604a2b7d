// Timeline: active memory over the trace's events, stacked by allocation, as PyTorch's Active
// Memory Timeline. Each band keeps its place while it lives (the server stacks them in the
// order they began, what was live before the trace at the bottom) and has its call site's
// colour; the allocations without a band of their own merge: those live before the trace
// above its bands, the rest on top. The server downsamples; dragging across the plot zooms
// into that range of events, for which the server picks the largest allocations again. Hover a
// band for its size, life and stack; the legend names the call sites that hold the peak.
import { api } from './api.js';
import { fillBands } from './band_raster.js';
import { counted, escapeHtml, grouped, humanBytes, legendHtml, siteColour } from './format.js';
import { framesHtml, hideTooltip, loading, pinStacks, searchBox, prepareCanvas, redrawOnResize, showTooltip } from './ui.js';

const LEFT = 78, RIGHT = 12, TOP = 12, BOTTOM = 40, HEIGHT = 452;

const roleColours = ['hsl(215, 55%, 55%)', 'hsl(275, 45%, 60%)', 'hsl(35, 85%, 58%)', 'hsl(145, 45%, 52%)', 'hsl(0, 0%, 78%)'];
// The global pools grey-blue; each private pool its own warm colour.
const poolColours = ['hsl(210, 25%, 72%)', 'hsl(48, 75%, 58%)', 'hsl(15, 75%, 60%)', 'hsl(330, 55%, 62%)', 'hsl(95, 45%, 55%)', 'hsl(275, 45%, 62%)'];
// The whole device: the allocator's active memory, the rest of what it reserved, then each
// other library of the process (warm colours).
const deviceColours = ['hsl(215, 55%, 55%)', 'hsl(215, 30%, 80%)', 'hsl(25, 80%, 58%)', 'hsl(48, 80%, 55%)', 'hsl(0, 60%, 62%)',
  'hsl(330, 50%, 62%)', 'hsl(95, 40%, 52%)', 'hsl(275, 40%, 62%)', 'hsl(170, 40%, 50%)', 'hsl(0, 0%, 62%)'];
// The whole device as stacked rows per sample: active, cached in the allocator, each library
// (none where the libraries are not known).
function wholeDeviceGroups(data) {
  const whole = data.whole_device;
  const bytes = data.samples.map((_, i) => [data.total_bytes[i], Math.max(0, whole.reserved_bytes[i] - data.total_bytes[i]),
    ...whole.libraries.map((_, k) => i >= whole.libraries_known_from ? whole.library_bytes[i][k] : 0)]);
  return { names: ['active (allocator)', 'reserved, not active (allocator cache)', ...whole.libraries], bytes, colours: deviceColours,
           known: i => i >= whole.libraries_known_from };
}
// A stacked breakdown the server sent (by role, by pool, the whole device), or null for bands.
const groupsOf = data => data.whole_device ? wholeDeviceGroups(data)
  : data.roles ? { names: data.roles, bytes: data.role_bytes, colours: roleColours }
  : data.pools ? { names: data.pools, bytes: data.pool_bytes, colours: poolColours } : null;

// A band has its call site's colour; neighbours alternate a little in lightness, so two bands
// of one site read as two. A call site's merged allocations are a lighter shade of it.
const bandColour = (band, index) => siteColour(band.label, index % 2 ? 4 : -3);
const mergedSiteColour = label => siteColour(label, 12);
// The rest of the merged allocations: live before the trace, and made in it.
const baseColour = 'rgb(168,178,194)', otherColour = 'rgb(212,212,212)';

// The merged regions as layers, bottom up, each per sample: { kind: 'base' | 'site' | 'other',
// label, colour, bottoms, bytes }.
function mergedLayers(data) {
  const layers = [{ kind: 'base', colour: baseColour, bottoms: data.base_bottom, bytes: data.base_bytes }];
  let bottoms = data.sites_bottom;
  data.merged_sites.forEach((label, k) => {
    const bytes = data.merged_site_bytes.map(row => row[k]);
    layers.push({ kind: 'site', label, colour: data.merged_site_colours[k], bottoms, bytes });
    bottoms = bottoms.map((b, i) => b + bytes[i]);
  });
  layers.push({ kind: 'other', colour: otherColour, bottoms: data.other_bottom, bytes: data.other_bytes });
  return layers;
}

// The merged regions at sample i, bottom up: { kind, label, colour, bottom, bytes }.
const mergedAt = (data, i) => data.merged_layers.map(({ kind, label, colour, bottoms, bytes }) =>
  ({ kind, label, colour, bottom: bottoms[i], bytes: bytes[i] }));

// What holds the peak by call site, bands and merged alike, the most first: [label, bytes, colour].
function peakSites(data) {
  const sites = new Map();
  const add = (label, bytes, colour) => {
    const site = sites.get(label) || { bytes: 0, colour };
    site.bytes += bytes;
    sites.set(label, site);
  };
  data.bands.forEach((band, index) => {
    if (band.start > data.peak_event || (band.end <= data.peak_event && band.end !== data.events)) return;
    add(band.label, band.size, bandColour(band, index));
  });
  const at = data.samples.indexOf(data.peak_event);
  if (at >= 0) for (const region of mergedAt(data, at)) if (region.kind === 'site' && region.bytes) add(region.label, region.bytes, region.colour);
  return [...sites].map(([label, site]) => [label, site.bytes, site.colour]).sort((a, b) => b[1] - a[1]);
}

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

// Ticks for the entry axis: round trace entry numbers (1, 2 or 5 times a power of ten apart)
// within the window, each placed where the samples put that entry (between two samples, in
// proportion), with the sample index nearest it for its time.
function entryTicks(data, count) {
  const entries = data.sample_entries, samples = data.samples;
  if (!entries.length) return [];
  const first = entries[0], last = entries[entries.length - 1];
  const raw = Math.max(1, (last - first) / count), power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= raw);
  const ticks = [];
  for (let entry = Math.ceil(first / step) * step; entry <= last; entry += step) {
    const i = lowerBound(entries, entry);
    let at = samples[i];
    if (entries[i] !== entry && i > 0)
      at = samples[i - 1] + (samples[i] - samples[i - 1]) * (entry - entries[i - 1]) / Math.max(1, entries[i] - entries[i - 1]);
    ticks.push({ entry, at, sample: i });
  }
  return ticks;
}

// A new view's state (windows: the zoom history, [begin, end] pairs), and what it asks the
// server for in a state.
const initialState = () => ({ device: undefined, windows: [], bands: 500, kind: 'active' });
function timelineParams(state) {
  const window = state.windows[state.windows.length - 1];
  const byRole = state.kind === 'roles', byPool = state.kind === 'pools', whole = state.kind === 'device';
  return { device: state.device, begin: window?.[0], end: window?.[1], bands: state.bands,
           kind: byRole || byPool || whole ? 'active' : state.kind, roles: byRole ? 1 : undefined, pools: byPool ? 1 : undefined,
           whole_device: whole ? 1 : undefined };
}

// Asks for what a new timeline of snapshot `id` shows first (api.ahead).
export const prefetchTimeline = id => api.ahead('timeline', id, timelineParams(initialState()));

export async function renderTimeline(container, { snapshot }) {
  const state = initialState();
  container.innerHTML = `
    <div class="toolbar">
      <span class="device-box"></span>
      <label title="Active memory by allocation (PyTorch's Active Memory Timeline), or reserved memory by segment and expandable mapping (its Active Cached Segment Timeline), or the whole device: what the allocator reserved and what the process's other libraries held">Memory
        <select class="kind" aria-label="Memory"><option value="active">active, by allocation</option><option value="roles">active, by role</option><option value="pools">active, by memory pool (incl. private pools)</option><option value="segments">reserved, by segment</option><option value="device">whole device: allocator and other libraries</option></select></label>
      <span class="role-legend"></span>
      <label title="How many allocations are drawn on their own; the rest are merged, by call site for the sites with the most">Detail
        <select class="detail" aria-label="Detail">${[50, 150, 500, 2000].map(n => `<option ${n === 500 ? 'selected' : ''}>${n}</option>`).join('')}</select></label>
      <button class="action back" disabled>Zoom out</button>
      <button class="action reset" disabled>Reset zoom</button>
      <span class="summary hint"></span>
    </div>
    <div class="hint">Drag across the plot to zoom into a range of the trace.</div>
    <div class="plot canvas-box"></div>
    <div class="site-legend hint"></div>`;
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
    data.merged_site_colours = data.merged_sites.map(mergedSiteColour);
    data.merged_layers = mergedLayers(data);
    data.top_bytes = Math.max(...data.total_bytes, ...data.most_bytes, 1);
    groups = groupsOf(data);
    const whole = data.whole_device;
    if (whole) {
      // The stack's top; the device's size too once the stack passes half of it.
      data.top_bytes = Math.max(whole.peak_bytes, ...groups.bytes.map(row => row.reduce((a, b) => a + b, 0)), 1);
      if (whole.device_total_bytes && data.top_bytes > whole.device_total_bytes / 2) data.top_bytes = Math.max(data.top_bytes, whole.device_total_bytes);
    }
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
    // The axis is spaced by allocations and frees, but every number shown is the trace's own
    // entry number (as Trace, Segments' "at event" and the state API count); the peak links to
    // the segments right after its entry.
    const [first, last] = data.window_entries;
    const range = state.windows.length ? `entries ${first}–${last} of ${data.entries}` : counted(data.entries, 'trace entry', 'trace entries');
    const [peakBytes, peakEntry] = whole ? [whole.peak_bytes, whole.peak_entry] : [data.peak_bytes, data.peak_entry];
    container.querySelector('.summary').innerHTML = escapeHtml(`${range} · ${counted(data.allocations, ...things)} · ` +
      (whole ? `the allocator and other libraries together peaked at ${humanBytes(peakBytes)} after ` :
        `${data.bands.length} drawn on their own · peak ${humanBytes(peakBytes)} after `)) +
      `<a class="peak-link" href="#segments/${encodeURIComponent(snapshot.id)}/${peakEntry}" ` +
      `title="the segments right after this entry of the trace">trace entry ${peakEntry}</a>`;
    container.querySelector('.site-legend').innerHTML = whole ? wholeDeviceLegend(whole) : groups ? '' : siteLegend();
    draw();
  };

  // What only the snapshot's moment knows (the driver's figures), and what cannot be drawn.
  const wholeDeviceLegend = whole => {
    const at = [];
    if (whole.context_bytes !== undefined) at.push(`${humanBytes(whole.context_bytes)} CUDA context and memory no recorded call made (module images, local memory)`);
    if (whole.other_processes_bytes !== undefined) at.push(`${humanBytes(whole.other_processes_bytes)} other processes`);
    if (whole.device_total_bytes !== undefined) at.push(`${humanBytes(whole.device_free_bytes)} free of the device's ${humanBytes(whole.device_total_bytes)}`);
    const lines = [];
    if (at.length) lines.push(`<div><span class="legend-title">At the snapshot only (the driver was asked then, not over time):</span> ${escapeHtml(at.join(' · '))}</div>`);
    if (whole.snapshot_note) lines.push(`<div>${escapeHtml(whole.snapshot_note)}</div>`);
    if (whole.libraries_note) lines.push(`<div class="whole-device-note">Other libraries: ${escapeHtml(whole.libraries_note)}.</div>`);
    else if (!whole.libraries.length) lines.push('<div>No other library of the process held device memory in this trace.</div>');
    return lines.join('');
  };

  // What holds the peak, by call site, in the sites' colours; then the rest of what is merged.
  const siteLegend = () => {
    const entries = peakSites(data).slice(0, 10).map(([label, bytes, colour]) => [colour, `${humanBytes(bytes)} ${label || 'no stack recorded'}`]);
    const at = data.samples.indexOf(data.peak_event);
    for (const region of at >= 0 ? mergedAt(data, at) : []) {
      if (region.kind === 'site' || !region.bytes) continue;
      entries.push([region.colour, `${humanBytes(region.bytes)} ${region.kind === 'base' ? 'live before the trace began' : 'other small allocations'}, merged`]);
    }
    const title = data.kind === 'segments' ? 'At the peak, by the call site that reserved each segment:' : 'At the peak, by call site:';
    return `<span class="legend-title">${title}</span>${legendHtml(entries)}`;
  };

  const geometry = () => {
    const width = Math.max(500, plot.clientWidth - 2);
    const [begin, end] = data.window;
    const top = data.top_bytes * 1.05;
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
      const bands = data.bands.map((band, index) => {
        const outline = band.outline, edges = new Float64Array(outline.length / 2 * 3);
        for (let i = 0, e = 0; i + 1 < outline.length; i += 2, e += 3) {
          edges[e] = g.x(outline[i]); edges[e + 1] = g.y(outline[i + 1]); edges[e + 2] = g.y(outline[i + 1] + band.size);
        }
        return { colour: bandColour(band, index), alpha: found && !found.has(band.stack) ? 0.15 : 1, edges };
      });
      // The merged allocations: live before the trace, above its bands; those made in it on top,
      // the largest call sites' apart. Written as bands too: a canvas path across the plot costs
      // its whole bounding box to fill.
      for (const { bottoms, bytes, colour } of data.merged_layers) {
        if (!bytes.some(b => b > 0)) continue;
        const edges = new Float64Array(data.samples.length * 3);
        data.samples.forEach((s, i) => { edges[3 * i] = g.x(s); edges[3 * i + 1] = g.y(bottoms[i]); edges[3 * i + 2] = g.y(bottoms[i] + bytes[i]); });
        bands.push({ colour: found ? 'rgb(212,212,212)' : colour, alpha: found ? 0.5 : 1, edges });
      }
      fillBands(context, bands, { left: LEFT, top: TOP, width: g.width - LEFT - RIGHT, height: HEIGHT - TOP - BOTTOM, ratio: window.devicePixelRatio || 1 });
    }
    // Where memory in use rose above the drawn outline between two samples (a long trace's steps
    // are shorter than a sample's interval): the most it reached, as a light block above.
    if (!groups) {
      context.fillStyle = 'rgba(90,90,120,.22)';
      context.beginPath();
      for (let i = 1; i < data.samples.length; ++i) {
        const drawn = Math.max(data.total_bytes[i - 1], data.total_bytes[i]);
        if (data.most_bytes[i] <= drawn) continue;
        const x0 = g.x(data.samples[i - 1]), x1 = g.x(data.samples[i]);
        context.rect(x0, g.y(data.most_bytes[i]), Math.max(x1 - x0, 1), g.y(drawn) - g.y(data.most_bytes[i]));
      }
      context.fill();
    }
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
    const whole = data.whole_device;
    if (whole) {
      // Before the libraries are known: hatched, with what the allocator held drawn over it.
      const from = whole.libraries_known_from;
      if (from > 0 && whole.libraries_note) {
        const x1 = from < data.samples.length ? g.x(data.samples[from]) : g.width - RIGHT;
        context.fillStyle = 'rgba(120,120,120,.12)';
        context.fillRect(LEFT, TOP, Math.max(x1 - LEFT, 0), HEIGHT - TOP - BOTTOM);
        context.fillStyle = '#666';
        context.fillText('other libraries not known here', LEFT + 6, TOP + 14);
      }
      if (whole.device_total_bytes && whole.device_total_bytes <= g.top) {
        context.strokeStyle = 'rgba(0,0,0,.6)'; context.setLineDash([2, 2]);
        context.beginPath(); context.moveTo(LEFT, g.y(whole.device_total_bytes)); context.lineTo(g.width - RIGHT, g.y(whole.device_total_bytes)); context.stroke();
        context.setLineDash([]);
        context.fillStyle = '#333';
        context.fillText(`device ${humanBytes(whole.device_total_bytes)}`, g.width - RIGHT - 120, g.y(whole.device_total_bytes) - 4);
      }
    }
    // Axes: bytes on the left, trace entries (and seconds) below, each tick at a sample.
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
    const ticks = entryTicks(data, Math.max(2, Math.floor((g.width - LEFT - RIGHT) / 150)));
    for (const [k, tick] of ticks.entries()) {
      const seconds = ((data.time_us[tick.sample] ?? t0) - t0) / 1e6;
      const x = g.x(tick.at);
      context.beginPath(); context.moveTo(x, HEIGHT - BOTTOM); context.lineTo(x, HEIGHT - BOTTOM + 3); context.stroke();
      const label = `${grouped(tick.entry)}${k === 0 && tick.entry === data.sample_entries[0] ? '' : `  +${seconds.toFixed(seconds < 10 ? 2 : 1)}s`}`;
      context.textAlign = x - context.measureText(label).width / 2 < LEFT ? 'left'
        : x + context.measureText(label).width / 2 > g.width - RIGHT ? 'right' : 'center';
      context.fillText(label, x, HEIGHT - BOTTOM + 14);
    }
    context.textAlign = 'center';
    context.fillStyle = '#777';
    context.fillText('trace entry (time since the first shown)', LEFT + (g.width - LEFT - RIGHT) / 2, HEIGHT - 6);
    context.fillStyle = '#444';
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
        // Out-of-memory labels hang from the top; annotations rise from just above the axis,
        // never across it.
        context.fillStyle = oom ? 'rgb(192,28,40)' : 'rgb(37,99,235)';
        context.save();
        if (oom) { context.translate(x + 3, TOP + 4); context.rotate(Math.PI / 2); }
        else { context.translate(x - 3, HEIGHT - BOTTOM - 10); context.rotate(-Math.PI / 2); }
        context.fillText(oom ? marker.label : `${marker.kind === 'END' ? '◂ ' : '▸ '}${marker.label}`.slice(0, 40), 0, 0);
        context.restore();
      }
    }
    // Peak marker (the whole device's in that mode).
    const [peakEvent, peakBytes] = whole ? [whole.peak_event, whole.peak_bytes] : [data.peak_event, data.peak_bytes];
    if (peakEvent >= begin && peakEvent <= end) {
      context.strokeStyle = 'rgba(194,65,12,.8)'; context.setLineDash([4, 3]);
      context.beginPath(); context.moveTo(LEFT, g.y(peakBytes)); context.lineTo(g.width - RIGHT, g.y(peakBytes)); context.stroke();
      context.setLineDash([]);
      context.fillStyle = 'rgb(194,65,12)';
      context.fillText(`${whole ? 'allocator + libraries peak' : 'peak'} ${humanBytes(peakBytes)}`, LEFT + 6, g.y(peakBytes) - 8);
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
    for (const region of mergedAt(data, i))
      if (bytes >= region.bottom && bytes < region.bottom + region.bytes) return { merged: region, sample, entry: data.sample_entries[i] };
    // Above the outline, below the most memory in use since the sample before.
    const next = Math.min(i + 1, data.samples.length - 1);
    if (bytes < data.most_bytes[next] && bytes >= Math.min(data.total_bytes[i], data.total_bytes[next]))
      return { range: next };
    return null;
  };

  // When a band was alive, in trace entries: from its alloc entry to its free_completed entry.
  const alive = band => `${band.before_trace ? 'from before the trace' : `from trace entry ${band.start_entry}`} ` +
    `${band.end === data.events ? 'to the end' : `to trace entry ${band.end_entry}`}`;
  let hovered = null, lastPointerY = 0;
  const pinBand = async (band) => {
    try {
      const stack = await api.stack(snapshot.id, band.stack);
      hideTooltip();
      pinStacks(`<span class="title">${humanBytes(band.size)} at 0x${band.address.toString(16)}, ${alive(band)}</span>`,
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
        // The whole device's libraries where they are not known: said, not drawn as nothing.
        const unknown = r => groups.known && r >= 2 && !groups.known(i);
        const rows = groups.names.map((name, r) => `<div><span class="k">${escapeHtml(name)}</span> ${unknown(r) ? 'not known' : humanBytes(groups.bytes[i][r])}</div>`).join('');
        const total = groups.known ? `<div><span class="k">together</span> ${humanBytes(groups.bytes[i].reduce((a, b) => a + b, 0))}${groups.known(i) ? '' : ' (the allocator alone)'}</div>` : '';
        showTooltip(e, `<div class="title">After trace entry ${data.sample_entries[i]}</div>${rows}${total}`);
        return;
      }
      const hit = hitTest(px, py);
      if (!hit) { hovered = null; hideTooltip(); return; }
      if (hit.range !== undefined) {
        hovered = null;
        const k = hit.range;
        showTooltip(e, `<div class="title">Memory in use rose to ${humanBytes(data.most_bytes[k])} and fell to ${humanBytes(data.least_bytes[k])}</div>
          <div>between trace entries ${data.sample_entries[k - 1] ?? data.sample_entries[k]} and ${data.sample_entries[k]}, more often than the picture has points: drag to zoom in</div>`);
        return;
      }
      if (hit.merged !== undefined) {
        hovered = null;
        const region = hit.merged;
        const what = region.kind === 'base' ? 'live before the trace began'
          : region.kind === 'site' ? `allocated by ${escapeHtml(region.label || 'no stack recorded')}` : 'in other small allocations';
        showTooltip(e, `<div class="title">${humanBytes(region.bytes)} ${what}, without a band of their own</div>
          <div>after trace entry ${hit.entry}: raise Detail, or drag to zoom in, to draw them one by one</div>`);
        return;
      }
      const band = hit.band;
      const head = `<div class="title">${humanBytes(band.size)} · ${escapeHtml(band.label || 'no stack')}</div>
        <div><span class="k">address</span> 0x${band.address.toString(16)} · <span class="k">alive</span> ${alive(band)}</div>`;
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
