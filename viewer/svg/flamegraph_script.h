// The script embedded in flamegraph SVGs (after svg_document.h's fmt()). Plain ES5 so any browser's SVG viewer runs it.
// Data arrives in one JSON object (the `D` global): per node its parent, depth, byte offset
// and layout width (in bytes), bytes, before-bytes, samples, address and label id.
#pragma once

namespace memsnap::svg {

inline constexpr const char* kFlamegraphScript = R"JS(
var svg = document.documentElement, details = null, matchText = null, zoomed = 0, searchRe = null;
var W = D.width, PAD = 10, CHAR = 7.0;
function node(i) { return document.getElementById('n' + i); }
function label(i) { return D.labels[D.l[i]]; }
function fit(i, w) {
  var t = label(i), n = Math.floor((w - 6) / CHAR);
  if (n < 3) return '';
  return t.length <= n ? t : t.substring(0, n - 2) + '..';
}
function isAncestor(a, i) { while (i > 0) { i = D.p[i]; if (i == a) return true; } return false; }
function place() {
  var zx = D.x[zoomed], zw = Math.max(D.w[zoomed], 1), scale = (W - 2 * PAD) / zw;
  for (var i = 0; i < D.p.length; i++) {
    var g = node(i); if (!g) continue;
    var inside = i == zoomed || isAncestor(zoomed, i), above = isAncestor(i, zoomed) || i == 0;
    var x, w;
    if (above) { x = PAD; w = W - 2 * PAD; }
    else if (inside) { x = PAD + (D.x[i] - zx) * scale; w = D.w[i] * scale; }
    else { g.style.display = 'none'; continue; }
    if (w < 0.1) { g.style.display = 'none'; continue; }
    g.style.display = '';
    var r = g.getElementsByTagName('rect')[0], t = g.getElementsByTagName('text')[0];
    r.setAttribute('x', x.toFixed(2)); r.setAttribute('width', Math.max(w - 0.5, 0.1).toFixed(2));
    r.style.opacity = above && i != zoomed ? '0.6' : '';
    t.setAttribute('x', (x + 3).toFixed(2)); t.textContent = fit(i, w);
  }
}
function show(i) {
  var path = [], j = i;
  while (j > 0) { path.unshift(label(j)); j = D.p[j]; }
  var total = D.v[0] || 1, lines = [];
  var head = label(i) + '  \u2014  ' + fmt(D.v[i]) + ' (' + (100 * D.v[i] / total).toFixed(2) + '%)';
  if (D.diff) head += ', before ' + fmt(D.b[i]) + ', change ' + (D.v[i] - D.b[i] >= 0 ? '+' : '') + fmt(D.v[i] - D.b[i]);
  head += ', ' + D.s[i] + (D.s[i] == 1 ? ' block' : ' blocks');
  if (D.s[i] == 1 && D.a[i]) head += ' at ' + D.a[i];
  lines.push(head);
  var first = Math.max(0, path.length - D.detailLines + 1);
  if (first > 0) lines.push('\u2026 ' + first + ' outer levels');
  for (var k = first; k < path.length; k++) lines.push('  '.repeat(Math.min(k - first, 12)) + path[k]);
  var spans = details.getElementsByTagName('tspan');
  for (var m = 0; m < spans.length; m++) spans[m].textContent = m < lines.length ? lines[m] : '';
}
function clearDetails() { var s = details.getElementsByTagName('tspan'); for (var m = 0; m < s.length; m++) s[m].textContent = ''; }
function highlight() {
  var matched = 0;
  for (var i = 1; i < D.p.length; i++) {
    var g = node(i); if (!g) continue;
    var hit = searchRe && searchRe.test(label(i));
    g.getElementsByTagName('rect')[0].setAttribute('fill', hit ? 'rgb(230,0,230)' : g.getAttribute('data-fill'));
    if (hit) { var j = D.p[i], nested = false; while (j > 0) { if (searchRe.test(label(j))) { nested = true; break; } j = D.p[j]; } if (!nested) matched += D.v[i]; }
  }
  matchText.textContent = searchRe ? 'Matched: ' + fmt(matched) + ' (' + (100 * matched / (D.v[0] || 1)).toFixed(2) + '%)' : '';
}
function search() {
  var term = prompt('Highlight labels matching (regular expression, case-insensitive):', searchRe ? searchRe.source : '');
  if (term === null) return;
  try { searchRe = term ? new RegExp(term, 'i') : null; } catch (e) { alert('Not a regular expression: ' + e.message); return; }
  highlight();
}
function init() {
  details = document.getElementById('details'); matchText = document.getElementById('matched');
  svg.addEventListener('mouseover', function (e) { var g = e.target.closest && e.target.closest('g.n'); if (g) show(+g.id.substring(1)); });
  svg.addEventListener('mouseout', function (e) { var g = e.target.closest && e.target.closest('g.n'); if (g) clearDetails(); });
  svg.addEventListener('click', function (e) {
    var g = e.target.closest && e.target.closest('g.n');
    if (g) { zoomed = +g.id.substring(1); place(); document.getElementById('unzoom').style.opacity = zoomed ? '1' : '0.3'; }
  });
  document.getElementById('unzoom').addEventListener('click', function (e) { e.stopPropagation(); zoomed = 0; place(); this.style.opacity = '0.3'; });
  document.getElementById('search').addEventListener('click', function (e) { e.stopPropagation(); search(); });
  document.addEventListener('keydown', function (e) {
    if (e.key == 'Escape') { zoomed = 0; searchRe = null; place(); highlight(); }
    if ((e.ctrlKey || e.metaKey) && e.key == 'f') { e.preventDefault(); search(); }
  });
  place();
}
if (!String.prototype.repeat) String.prototype.repeat = function (n) { var s = ''; while (n-- > 0) s += this; return s; };
window.addEventListener('load', init);
)JS";

}  // namespace memsnap::svg
