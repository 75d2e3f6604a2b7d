// Stacked bands written into the canvas's pixels directly, one column at a time. A canvas
// fills a path by scanning its whole bounding box, so a timeline of 150 bands that each span
// the plot took 200 ms to rasterize in a browser without GPU canvas; writing each band's
// column spans into one ImageData takes a few milliseconds whatever the browser.
//
// Each band is an outline of points (x, bottom y, top y) in CSS pixels, x increasing and y
// growing downwards: between two points its edges are straight lines, as a path through the
// same points would draw them. Bands that touch share their edge value, so stacked bands meet
// without a gap or an overlap.

// '#rrggbb' (or 'rgba(...)') for any CSS colour, as the canvas parses it.
function rgbOf(context, colour) {
  context.fillStyle = colour;
  const parsed = context.fillStyle;
  if (parsed.startsWith('#')) return [1, 3, 5].map(i => parseInt(parsed.slice(i, i + 2), 16));
  return parsed.match(/[\d.]+/g).slice(0, 3).map(Number);
}

// Fills `bands` ({ edges: [x0, bottom0, top0, x1, bottom1, top1, ...] (a Float64Array),
// colour, alpha }) into the rectangle (left, top, width, height) of the canvas, all in CSS
// pixels; `ratio` is device pixels per CSS pixel. Writes the rectangle's pixels: draw what goes
// over the bands afterwards.
export function fillBands(context, bands, { left, top, width, height, ratio }) {
  const columns = Math.max(1, Math.round(width * ratio)), rows = Math.max(1, Math.round(height * ratio));
  const image = context.createImageData(columns, rows);
  const pixels = new Uint32Array(image.data.buffer);
  const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  for (const band of bands) {
    const edges = band.edges;
    if (edges.length < 6) continue;
    const [r, g, b] = rgbOf(context, band.colour);
    const a = Math.round(255 * (band.alpha ?? 1));
    const value = littleEndian ? ((a << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | a) >>> 0;
    for (let i = 0; i + 5 < edges.length; i += 3) {
      const x0 = edges[i], bottom0 = edges[i + 1], top0 = edges[i + 2];
      const x1 = edges[i + 3], bottom1 = edges[i + 4], top1 = edges[i + 5];
      const px0 = (x0 - left) * ratio, px1 = (x1 - left) * ratio;
      if (px1 <= px0) continue;
      // The columns whose centre lies in [px0, px1).
      const first = Math.max(0, Math.ceil(px0 - 0.5)), last = Math.min(columns, Math.ceil(px1 - 0.5));
      for (let c = first; c < last; ++c) {
        const t = (c + 0.5 - px0) / (px1 - px0);
        const low = Math.min(rows, Math.round(((bottom0 + (bottom1 - bottom0) * t) - top) * ratio));
        const high = Math.max(0, Math.round(((top0 + (top1 - top0) * t) - top) * ratio));
        for (let row = high, at = high * columns + c; row < low; ++row, at += columns) pixels[at] = value;
      }
    }
  }
  // putImageData ignores the context's transform: the rectangle is placed in device pixels.
  context.putImageData(image, Math.round(left * ratio), Math.round(top * ratio));
}
