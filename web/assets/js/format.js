// Shared text and colour helpers: sizes in human units, and the colours every view uses for a
// name, the same as the CLI's SVGs (FNV-1a of the name picks a shade within the category's hue).

export function humanBytes(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = Math.abs(bytes), unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; ++unit; }
  const text = unit === 0 ? `${value} B` : `${value.toFixed(value >= 100 ? 1 : 2)} ${units[unit]}`;
  return bytes < 0 ? `-${text}` : text;
}

export function signedBytes(bytes) { return (bytes > 0 ? '+' : '') + humanBytes(bytes); }

// A share as people read it: "0%" for nothing, two significant digits below 0.1% ("0.0042%"),
// else one decimal; never "0.000%" for a share that is not zero.
export function percent(part, whole) {
  if (!whole || !part) return '0%';
  const share = 100 * part / whole;
  return `${Math.abs(share) < 0.1 ? share.toPrecision(2) : share.toFixed(1)}%`;
}

export function hex(value) { return '0x' + Number(value).toString(16); }

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

const encoder = new TextEncoder();
export function stableHash(text) {
  let hash = 2166136261;
  for (const byte of encoder.encode(text)) { hash ^= byte; hash = Math.imul(hash, 16777619) >>> 0; }
  return hash >>> 0;
}

const hues = {
  root: null, active_allocated: [8, 40, 85, 58], active_pending_free: [275, 25, 60, 62],
  inactive: [195, 25, 55, 66], gaps: null, grouping: [95, 40, 45, 62],
};

export function categoryColour(category, label) {
  if (category === 'root') return 'rgb(200,200,200)';
  if (category === 'gaps') return 'rgb(170,170,170)';
  const [h, spread, s, l] = hues[category] || hues.active_allocated;
  const jitter = (stableHash(label || '') % 1000) / 1000;
  const lightness = category === 'grouping' ? l + 8 * jitter : l + 10 * jitter;
  return `hsl(${h + spread * jitter}, ${s}%, ${lightness}%)`;
}

export function diffColour(after, before) {
  if (after === before) return 'rgb(235,235,235)';
  const change = (after - before) / Math.max(after, before);
  const fade = Math.round(210 - 170 * Math.abs(change));
  return change > 0 ? `rgb(255,${fade},${fade})` : `rgb(${fade},${fade},255)`;
}

// A call site's colour, the same in every view and file (viewer/svg/svg_text.cpp's
// site_colour makes the same one): the hue, saturation and lightness come from the site's
// label; `shade` (a few points of lightness) tells neighbouring bands of one site apart.
// A view asks for the same few hundred sites' colours thousands of times: each label is hashed once.
const siteHashes = new Map();
export function siteColour(label, shade = 0) {
  if (!label) return `hsl(30, 8%, ${60 + shade}%)`;
  let h = siteHashes.get(label);
  if (h === undefined) {
    if (siteHashes.size > 100000) siteHashes.clear();
    siteHashes.set(label, h = stableHash(label));
  }
  return `hsl(${h % 360}, ${55 + (h >>> 9) % 20}%, ${52 + (h >>> 17) % 14 + shade}%)`;
}

export const stateColours = {
  active_allocated: 'hsl(20, 80%, 60%)', active_pending_free: 'hsl(285, 55%, 65%)', inactive: 'hsl(205, 30%, 86%)',
};

export function legendHtml(entries) {
  return `<div class="legend">${entries.map(([colour, name]) =>
    `<span style="--swatch:${colour}">${escapeHtml(name)}</span>`).join('')}</div>`;
}

// Fits `text` into `width` pixels with an ellipsis, for canvas labels.
export function fitText(context, text, width) {
  if (width < 20) return '';
  if (context.measureText(text).width <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (context.measureText(text.slice(0, mid) + '…').width <= width) lo = mid; else hi = mid - 1;
  }
  return lo > 0 ? text.slice(0, lo) + '…' : '';
}

// 1234567 -> "1,234,567". By hand: the first toLocaleString of a page loads the locale's data,
// 20 ms before the first view can draw.
export function grouped(count) {
  return String(count).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

// "1 event", "2 events".
export function counted(count, singular, plural = `${singular}s`) {
  return `${grouped(count)} ${count === 1 ? singular : plural}`;
}
