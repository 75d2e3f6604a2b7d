// Flamegraph view: memory by state then stack (PyTorch's "memory" view), or by stream and
// segment; drawn on a canvas, or opened as the CLI's self-contained SVG.
import { api } from './api.js';
import { categoryColour, humanBytes, legendHtml } from './format.js';
import { Flamegraph } from './flamegraph.js';
import { loading } from './ui.js';

let kind = 'memory';

// Asks for what the flamegraph of snapshot `id` shows first (api.ahead).
export const prefetchFlamegraph = id => api.ahead('flamegraph', id, { kind });

export async function renderFlamegraph(container, { snapshot }) {
  container.innerHTML = `
    <div class="toolbar">
      <label>Kind <select class="kind" aria-label="Flamegraph kind">
        <option value="memory">memory by state and stack</option>
        <option value="segments">memory by stream and segment</option></select></label>
      <a class="button svg-link" target="_blank" rel="noopener">Open as SVG</a>
      <span class="total hint"></span>
    </div>
    ${legendHtml([['active_allocated', 'allocated'], ['active_pending_free', 'freed, pending'], ['inactive', 'free (cached)'],
                  ['gaps', 'rounding'], ['grouping', 'stream / segment']].map(([c, n]) => [categoryColour(c, ''), n]))}
    <div class="graph"></div>`;
  const select = container.querySelector('.kind');
  const graph = container.querySelector('.graph');
  select.value = kind;
  const show = async () => {
    kind = select.value;
    container.querySelector('.svg-link').href = api.flamegraphSvgUrl(snapshot.id, { kind });
    loading(graph, 'flamegraph');
    const data = await api.flamegraph(snapshot.id, { kind });
    container.querySelector('.total').textContent = `${humanBytes(data.total_bytes)} in ${data.nodes.length} nodes` +
      (data.dropped_nodes ? ` (${data.dropped_nodes} too small to see left out)` : '');
    new Flamegraph(graph, data);
  };
  select.addEventListener('change', show);
  await show();
}
