// The server's JSON API, with one error path: a refused request becomes an Error carrying
// the server's own one-line message. Stacks and block details are cached, as hovering asks
// for the same ones again and again.

async function request(path, options = {}) {
  const response = await fetch(path, options);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try { message = (await response.json()).error || message; } catch { /* not JSON */ }
    throw new Error(message);
  }
  if (response.status === 204) return null;
  return response.json();
}

function query(params = {}) {
  const parts = Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== '');
  return parts.length ? '?' + parts.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&') : '';
}

// "All frames" (the tab bar's toggle): stacks unfolded, with full C++ signatures. Kept across
// reloads; every request that returns frames carries it.
let allFrames = localStorage.getItem('memsnap.allFrames') === '1';
export function allFramesShown() { return allFrames; }
export function showAllFrames(on) {
  allFrames = Boolean(on);
  localStorage.setItem('memsnap.allFrames', allFrames ? '1' : '0');
  detailCache.clear();
}
const withFrames = (params = {}) => (allFrames ? { ...params, all_frames: 1 } : params);

// Answers asked for ahead of their view: the first view's request goes out as soon as the
// page's script runs, while the page is still set up (and the server may still be reading
// its files); the view's own request for the same path then takes that answer. One use each,
// and those not taken are dropped once the first view has been drawn.
const ahead = new Map();
function get(path) {
  const early = ahead.get(path);
  if (early === undefined) return request(path);
  ahead.delete(path);
  return early;
}

const detailCache = new Map();
function cachedDetail(path) {
  if (!detailCache.has(path)) {
    const pending = request(path).catch(error => { detailCache.delete(path); throw error; });
    detailCache.set(path, pending);
    if (detailCache.size > 5000) detailCache.delete(detailCache.keys().next().value);
  }
  return detailCache.get(path);
}

// The paths of the views' first requests, for api.ahead.
const paths = {
  stats: (id) => `/api/snapshots/${id}/stats`,
  flamegraph: (id, params) => `/api/snapshots/${id}/flamegraph${query(withFrames(params))}`,
  segments: (id, params) => `/api/snapshots/${id}/segments${query(withFrames(params))}`,
  timeline: (id, params) => `/api/snapshots/${id}/timeline${query(withFrames(params))}`,
};

export const api = {
  list: () => request('/api/snapshots'),
  upload: (file) => request(`/api/snapshots${query({ name: file.name })}`, {
    method: 'POST', headers: { 'Content-Type': 'application/octet-stream' }, body: file,
  }),
  remove: (id) => request(`/api/snapshots/${id}`, { method: 'DELETE' }),
  stats: (id) => get(paths.stats(id)),
  statsText: async (id) => {
    const response = await fetch(`/api/snapshots/${id}/stats.txt`);
    if (!response.ok) throw new Error(`stats: ${response.status}`);
    return response.text();
  },
  flamegraph: (id, params) => get(paths.flamegraph(id, params)),
  flamegraphSvgUrl: (id, params) => `/api/snapshots/${id}/flamegraph.svg${query(withFrames(params))}`,
  segments: (id, params) => get(paths.segments(id, params)),
  block: (id, segment, block) => cachedDetail(`/api/snapshots/${id}/segments/${segment}/blocks/${block}${query(withFrames())}`),
  stack: (id, stack) => cachedDetail(`/api/snapshots/${id}/stacks/${stack}${query(withFrames())}`),
  timeline: (id, params) => get(paths.timeline(id, params)),
  oom: (id, params) => request(`/api/snapshots/${id}/oom${query(params)}`),
  state: (id, params) => request(`/api/snapshots/${id}/state${query(params)}`),
  growth: (id, params) => request(`/api/snapshots/${id}/growth${query(params)}`),
  tune: (id, params) => request(`/api/snapshots/${id}/tune${query(params)}`),
  search: (id, params) => request(`/api/snapshots/${id}/search${query(withFrames(params))}`),
  trace: (id, params) => request(`/api/snapshots/${id}/trace${query(withFrames(params))}`),
  ranks: () => request('/api/ranks'),
  openRank: (row) => request(`/api/ranks/${row}/open`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}',
  }),
  compare: (before, after, params) => request(`/api/compare${query({ before, after, ...params })}`),
  // Asks now for what api[name](...args) will ask: api.ahead('timeline', id, params).
  ahead: (name, ...args) => {
    const path = paths[name](...args);
    if (ahead.has(path)) return;
    const pending = request(path);
    pending.catch(() => {});  // (the view that takes it sees the error)
    ahead.set(path, pending);
  },
  dropAhead: () => ahead.clear(),
};
