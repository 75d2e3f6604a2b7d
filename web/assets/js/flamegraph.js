// A canvas flamegraph (icicle: the root on top) over the API's preorder node list. Hover shows
// the node's whole stack, bytes and share; click zooms into a node (its ancestors stay as
// full-width bars above it, click one or press Escape to zoom back out); the breadcrumb names
// the zoom path; search highlights matching frames and adds up their bytes. Differential mode
// (compare) colours by growth and lays out before + after bytes.
import { categoryColour, diffColour, escapeHtml, fitText, humanBytes, percent, signedBytes } from './format.js';
import { hideTooltip, prepareCanvas, redrawOnResize, showTooltip } from './ui.js';

const ROW = 18;
const MIN_PIXELS = 0.35;

export class Flamegraph {
  constructor(container, data, options = {}) {
    this.container = container;
    this.differential = !!options.differential;
    this.unit = options.unit || 'blocks';
    this.labels = data.labels;
    this.categories = data.categories;
    const count = data.nodes.length;
    this.parent = new Int32Array(count);
    this.label = new Int32Array(count);
    this.category = new Uint8Array(count);
    this.bytes = new Float64Array(count);
    this.before = new Float64Array(count);
    this.samples = new Float64Array(count);
    this.depth = new Int32Array(count);
    this.children = Array.from({ length: count }, () => []);
    data.nodes.forEach(([parent, label, category, bytes, before, samples], i) => {
      this.parent[i] = parent; this.label[i] = label; this.category[i] = category;
      this.bytes[i] = bytes; this.before[i] = before; this.samples[i] = samples;
      if (parent >= 0) { this.children[parent].push(i); this.depth[i] = this.depth[parent] + 1; }
    });
    this.zoom = 0;
    this.search = null;
    this.build();
  }

  width(node) { return this.differential ? this.bytes[node] + this.before[node] : this.bytes[node]; }
  name(node) { return this.labels[this.label[node]]; }
  categoryName(node) { return this.categories[this.category[node]]; }

  build() {
    this.container.innerHTML = `
      <div class="toolbar">
        <input type="search" class="flame-search" placeholder="Search frames (regex)  /" aria-label="Search frames">
        <span class="flame-match hint"></span>
        <span class="hint">click a frame to zoom · Esc zooms out</span>
      </div>
      <div class="breadcrumb" aria-label="Zoom path"></div>
      <div class="canvas-box"><canvas tabindex="0" aria-label="Flamegraph"></canvas></div>`;
    this.canvas = this.container.querySelector('canvas');
    this.breadcrumb = this.container.querySelector('.breadcrumb');
    this.matchLine = this.container.querySelector('.flame-match');
    const searchBox = this.container.querySelector('.flame-search');
    searchBox.addEventListener('input', () => this.setSearch(searchBox.value));
    this.canvas.addEventListener('mousemove', e => this.hover(e));
    this.canvas.addEventListener('mouseleave', hideTooltip);
    this.canvas.addEventListener('click', e => {
      const node = this.nodeAt(e);
      if (node !== null) this.zoomTo(node === this.zoom && node !== 0 ? this.parent[node] : node);
    });
    this.container.addEventListener('keydown', e => {
      if (e.key === 'Escape' && this.zoom !== 0) { this.zoomTo(this.parent[this.zoom]); e.preventDefault(); }
      if (e.key === '/' && e.target !== searchBox) { searchBox.focus(); e.preventDefault(); }
    });
    redrawOnResize(this.container, () => this.draw());
    this.draw();
  }

  zoomTo(node) {
    this.zoom = Math.max(0, node);
    hideTooltip();
    this.draw();
  }

  setSearch(text) {
    if (!text) { this.search = null; this.draw(); return; }
    try { this.search = new RegExp(text, 'i'); } catch { this.search = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i'); }
    this.draw();
  }

  colour(node) {
    if (this.search && this.search.test(this.name(node))) return 'rgb(230,0,230)';
    if (this.differential && node !== 0) return diffColour(this.bytes[node], this.before[node]);
    return categoryColour(this.categoryName(node), this.name(node));
  }

  draw() {
    const totalWidth = Math.max(400, this.container.clientWidth - 2);
    const zoom = this.zoom;
    const scale = totalWidth / Math.max(this.width(zoom), 1);
    // Lay out the zoomed subtree; ancestors of the zoom root span the whole width above it.
    const rows = [];
    const place = (node, x, depth, w) => { (rows[depth] ||= []).push([x, w, node]); };
    const ancestors = [];
    for (let a = this.parent[zoom]; zoom !== 0 && a >= 0; a = this.parent[a]) ancestors.unshift(a);
    ancestors.forEach((a, d) => place(a, 0, d, totalWidth));
    const base = ancestors.length;
    const stack = [[zoom, 0]];
    while (stack.length) {
      const [node, x] = stack.pop();
      const w = this.width(node) * scale;
      const depth = base + this.depth[node] - this.depth[zoom];
      place(node, x, depth, w);
      let childX = x;
      for (const child of this.children[node]) {
        const cw = this.width(child) * scale;
        if (cw >= MIN_PIXELS) stack.push([child, childX]);
        childX += cw;
      }
    }
    this.rows = rows;
    const height = rows.length * ROW + 4;
    const context = prepareCanvas(this.canvas, totalWidth, height);
    context.clearRect(0, 0, totalWidth, height);
    rows.forEach((row, depth) => {
      for (const [x, w, node] of row) {
        context.fillStyle = this.colour(node);
        context.fillRect(x + 0.5, depth * ROW + 1, Math.max(w - 1, 0.5), ROW - 2);
        if (w > 28) {
          context.fillStyle = '#111';
          context.fillText(fitText(context, this.name(node), w - 8), x + 4, depth * ROW + ROW / 2);
        }
      }
    });
    if (this.search) {
      const view = this.bytes[zoom], matched = this.matchedBytes();
      this.matchLine.textContent = `matched ${humanBytes(matched)} (${percent(matched, view)} of this view)`;
    } else {
      this.matchLine.textContent = '';
    }
    this.drawBreadcrumb(ancestors);
  }

  // Bytes of the matching frames in the zoomed view; a match inside a match is not counted twice.
  matchedBytes() {
    let matched = 0;
    const stack = [this.zoom];
    while (stack.length) {
      const node = stack.pop();
      if (this.search.test(this.name(node))) { matched += this.bytes[node]; continue; }
      stack.push(...this.children[node]);
    }
    return matched;
  }

  drawBreadcrumb(ancestors) {
    const path = [...ancestors, this.zoom].filter((n, i, all) => all.indexOf(n) === i);
    this.breadcrumb.innerHTML = '';
    if (this.zoom === 0) return;
    for (const node of path) {
      const button = document.createElement('button');
      button.textContent = node === 0 ? 'all' : this.name(node);
      button.title = this.name(node);
      button.addEventListener('click', () => this.zoomTo(node));
      this.breadcrumb.appendChild(button);
    }
  }

  nodeAt(event) {
    const rect = this.canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, depth = Math.floor((event.clientY - rect.top) / ROW);
    const row = this.rows?.[depth];
    if (!row) return null;
    for (const [nx, w, node] of row) if (x >= nx && x < nx + Math.max(w, 1)) return node;
    return null;
  }

  hover(event) {
    const node = this.nodeAt(event);
    if (node === null) { hideTooltip(); this.canvas.style.cursor = ''; return; }
    this.canvas.style.cursor = 'pointer';
    const path = [];
    for (let n = node; n > 0; n = this.parent[n]) path.push(this.name(n));
    const total = this.bytes[0], view = this.bytes[this.zoom];
    let lines = `<div><span class="k">bytes</span> ${humanBytes(this.bytes[node])} · ${percent(this.bytes[node], total)} of all`;
    if (this.zoom !== 0) lines += ` · ${percent(this.bytes[node], view)} of the zoomed view`;
    lines += '</div>';
    if (this.differential) {
      lines += `<div><span class="k">before</span> ${humanBytes(this.before[node])} · <span class="k">change</span> ${signedBytes(this.bytes[node] - this.before[node])}</div>`;
    }
    lines += `<div><span class="k">${this.unit}</span> ${this.samples[node]}</div>`;
    const shown = path.slice(0, 40).map(escapeHtml).join('\n');
    showTooltip(event, `<div class="title">${escapeHtml(this.name(node))}</div>${lines}
      <div class="frames">${shown}${path.length > 40 ? `\n… ${path.length - 40} more` : ''}</div>`);
  }
}
