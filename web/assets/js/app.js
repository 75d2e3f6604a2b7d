// The page: the list of open snapshots (pick one; Compare picks two), the view tabs, opening
// files by picker or drag and drop, and the address bar (#view/id) so a view can be bookmarked
// or reloaded. A server given a job (a folder of rank snapshots) also has the Ranks view,
// which needs no open snapshot and opens ranks on demand.
import { allFramesShown, api, showAllFrames } from './api.js';
import { counted, escapeHtml, humanBytes } from './format.js';
import { hideTooltip, setMessage, unpinStacks } from './ui.js';
import { renderCompare } from './compare_view.js';
import { prefetchFlamegraph, renderFlamegraph } from './flamegraph_view.js';
import { renderOom } from './oom_view.js';
import { loadJob, renderRanks } from './ranks_view.js';
import { prefetchSegments, renderSegments } from './segments_view.js';
import { prefetchStats, renderStats } from './stats_view.js';
import { prefetchTimeline, renderTimeline } from './timeline_view.js';
import { renderTrace } from './trace_view.js';

const views = {
  stats: renderStats, flamegraph: renderFlamegraph, segments: renderSegments,
  timeline: renderTimeline, trace: renderTrace, compare: renderCompare, oom: renderOom, ranks: renderRanks,
};
// The views whose first answer can be asked for before the page knows the snapshots.
const prefetches = { stats: prefetchStats, flamegraph: prefetchFlamegraph, segments: prefetchSegments, timeline: prefetchTimeline };
const state = { snapshots: [], notOpened: [], serverHasJob: false, selected: null, view: 'stats', hasJob: false, compareBefore: null };
let renderCount = 0;

// #VIEW/ID, and for Segments #segments/ID/ENTRY: the state right after that trace entry.
function readLocation() {
  const [view, id, entry] = location.hash.replace(/^#\/?/, '').split('/');
  if (views[view]) state.view = view;
  if (id) state.selected = id;
  state.atEntry = view === 'segments' && /^\d+$/.test(entry || '') ? Number(entry) : null;
}

function writeLocation() {
  const entry = state.view === 'segments' && state.atEntry !== null && state.atEntry !== undefined ? `/${state.atEntry}` : '';
  const hash = `#${state.view}${state.selected ? '/' + state.selected + entry : ''}`;
  if (location.hash !== hash) history.replaceState(null, '', hash);
}

function renderSnapshotList() {
  const box = document.getElementById('snapshots');
  box.innerHTML = state.snapshots.map(s => `
    <span class="chip" role="radio" tabindex="0" aria-checked="${s.id === state.selected}" data-id="${s.id}"
          title="${escapeHtml(`${s.name} · ${s.format}${s.compressed ? ' (gzip)' : ''} · ${s.source}`)}">
      <span class="name">${escapeHtml(s.name)}</span>
      <span class="meta">${humanBytes(s.reserved_bytes)} · ${counted(s.events, 'event')}</span>
      <button class="close" aria-label="Close ${escapeHtml(s.name)}" data-close="${s.id}">×</button>
    </span>`).join('') || '<span class="hint">No snapshot open.</span>';
  // Files the server was given and could not read: named with the reason, not hidden.
  if (state.notOpened.length)
    box.insertAdjacentHTML('beforeend', `<span class="not-opened hint" title="${escapeHtml(state.notOpened.map(f => f.error).join('\n'))}">
      not opened: ${state.notOpened.map(f => escapeHtml(f.error)).join('; ')}</span>`);
}

async function renderView() {
  hideTooltip();
  unpinStacks();
  writeLocation();
  document.querySelectorAll('.tabs button').forEach(b => b.setAttribute('aria-selected', String(b.dataset.view === state.view)));
  const container = document.getElementById('view');
  const snapshot = state.snapshots.find(s => s.id === state.selected);
  // The OOM tab is offered only for a snapshot that holds an out-of-memory error.
  document.querySelector('.tabs button[data-view="oom"]').hidden = !(snapshot?.has_oom || state.view === 'oom');
  document.querySelector('.tabs button[data-view="ranks"]').hidden = !state.hasJob;
  const mine = ++renderCount;
  container.replaceChildren();
  if (!snapshot && !(state.view === 'ranks' && state.hasJob)) {
    container.innerHTML = `<div class="empty">Open a snapshot: memsnap <code>.msgpack</code> or PyTorch <code>.pickle</code> (gzip or not).<br>
      Use <b>Open snapshot…</b> above or drop files anywhere on this page.</div>`;
    return;
  }
  // A view left while still loading must not draw over the next one: each gets its own element.
  const body = document.createElement('div');
  container.appendChild(body);
  try {
    await views[state.view](body, { snapshot, snapshots: state.snapshots, compareBefore: state.compareBefore, openRank,
                                    atEntry: state.atEntry });
  } catch (error) {
    console.error(`${state.view} view:`, error.stack || error);
    if (mine === renderCount) body.innerHTML = `<div class="message error">${escapeHtml(error.message)}</div>`;
  }
}

// Without a selection (or when it was closed) the newest snapshot is shown, or with `first`
// (the page just opened) the first the server was given.
async function refresh(first = false) {
  const list = await api.list();
  state.snapshots = list.snapshots;
  state.notOpened = list.not_opened ?? [];
  state.serverHasJob = Boolean(list.job);
  if (!state.snapshots.some(s => s.id === state.selected)) state.selected = (first ? state.snapshots[0] : state.snapshots.at(-1))?.id ?? null;
  renderSnapshotList();
}

async function upload(files) {
  let last = null;
  for (const file of files) {
    setMessage(`Uploading ${file.name} (${humanBytes(file.size)})…`);
    try {
      last = await api.upload(file);
    } catch (error) {
      setMessage(`${file.name}: ${error.message}`, true);
      await refresh();
      return;
    }
  }
  setMessage(last ? `Opened ${last.name}` : '');
  setTimeout(() => setMessage(''), 3000);
  if (!last) {
    await refresh();
    renderView();
    return;
  }
  // The upload's answer is the new snapshot's summary: its view is asked for at once, and the
  // list (which may hold other new snapshots) is read again meanwhile.
  state.snapshots = [...state.snapshots.filter(s => s.id !== last.id), last];
  state.selected = last.id;
  renderSnapshotList();
  renderView();
  await refresh();
}

// Opens a rank of the job (loading its snapshot on the server) in `view`; with `beforeRow`, the
// Compare view shows that rank as "before".
async function openRank(row, view, beforeRow = null) {
  try {
    setMessage('Opening the rank…');
    const before = beforeRow === null ? null : await api.openRank(beforeRow);
    const opened = await api.openRank(row);
    setMessage('');
    await refresh();
    state.selected = opened.id;
    state.compareBefore = before?.id ?? null;
    state.view = view;
  } catch (error) {
    setMessage(error.message, true);
    return;
  }
  renderSnapshotList();
  renderView();
}

function select(id) {
  if (id === state.selected) return;
  state.selected = id;
  renderSnapshotList();
  renderView();
}

function setUpEvents() {
  document.querySelector('.tabs').addEventListener('click', e => {
    const tab = e.target.closest('button[data-view]');
    if (tab) { state.view = tab.dataset.view; state.atEntry = null; renderView(); }
  });
  document.querySelector('.tabs').addEventListener('keydown', e => {
    const tabs = [...document.querySelectorAll('.tabs button:not([hidden])')];
    const index = tabs.indexOf(document.activeElement);
    if (index < 0 || !['ArrowLeft', 'ArrowRight'].includes(e.key)) return;
    const next = tabs[(index + (e.key === 'ArrowRight' ? 1 : tabs.length - 1)) % tabs.length];
    next.focus(); next.click();
  });
  const list = document.getElementById('snapshots');
  list.addEventListener('click', async e => {
    const close = e.target.closest('[data-close]');
    if (close) {
      e.stopPropagation();
      try { await api.remove(close.dataset.close); } catch (error) { setMessage(error.message, true); }
      await refresh();
      renderView();
      return;
    }
    const chip = e.target.closest('.chip');
    if (chip) select(chip.dataset.id);
  });
  list.addEventListener('keydown', e => {
    const chip = e.target.closest('.chip');
    if (chip && (e.key === 'Enter' || e.key === ' ')) { select(chip.dataset.id); e.preventDefault(); }
  });
  const input = document.getElementById('file-input');
  input.addEventListener('change', () => { upload([...input.files]); input.value = ''; });
  document.getElementById('open-button').addEventListener('keydown', e => {
    if (e.key === 'Enter' || e.key === ' ') { input.click(); e.preventDefault(); }
  });
  const overlay = document.getElementById('drop-overlay');
  let depth = 0;
  window.addEventListener('dragenter', e => { if (e.dataTransfer?.types.includes('Files')) { ++depth; overlay.hidden = false; } });
  window.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; overlay.hidden = true; } });
  window.addEventListener('dragover', e => e.preventDefault());
  window.addEventListener('drop', e => {
    e.preventDefault();
    depth = 0; overlay.hidden = true;
    if (e.dataTransfer?.files.length) upload([...e.dataTransfer.files]);
  });
  window.addEventListener('keydown', e => {
    if (e.target.closest('input, select, textarea') || e.ctrlKey || e.metaKey || e.altKey) return;
    const view = Object.keys(views)[Number(e.key) - 1];
    if (view) { state.view = view; state.atEntry = null; renderView(); }
  });
  window.addEventListener('hashchange', () => { readLocation(); renderSnapshotList(); renderView(); });
  const allFrames = document.getElementById('all-frames');
  allFrames.checked = allFramesShown();
  allFrames.addEventListener('change', () => { showAllFrames(allFrames.checked); renderView(); });
}

async function start() {
  readLocation();
  // A page opened at a view of a snapshot (#timeline/1) asks for that view's data at once,
  // alongside the list of snapshots, rather than after it.
  if (state.selected) prefetches[state.view]?.(state.selected);
  setUpEvents();
  // A server started on big files listens at once and answers once they are read.
  const slow = setTimeout(() => setMessage('memsnap serve is still reading the snapshots it was given…'), 400);
  try {
    await refresh(true);
  } catch (error) {
    setMessage(`Cannot reach the memsnap server: ${error.message}`, true);
    return;
  } finally {
    clearTimeout(slow);
  }
  setMessage('');
  // Only a server that holds a job (the list says so) is asked for it: no Ranks view otherwise.
  state.hasJob = state.serverHasJob && await loadJob().then(() => true, () => false);
  if (state.hasJob && !location.hash.replace(/^#\/?/, '') && state.snapshots.length === 0) state.view = 'ranks';
  await renderView();
  api.dropAhead();
}

start();
