// Machines page: the filterable, sortable machines table, the "Return selected" flow
// (operators) and the machine drawer with its pod, conditions and events.

import {
  $, $$, esc, api, badge, tone, timeHtml, fmtDuration, emptyHtml, shortId, announce, isAbort,
  reportError, canOperate, COLLATOR, fetchAllMachines, markRendered, repeat,
} from './core.js';

const MAX_TABLE_ROWS = 500;        // more rows than this only slow the browser down
const NONE = ':none';              // <select> value for "field is empty" (no k8s name has ':')

const MACHINE_FILTERS = [
  { id: 'filter-state', field: 'status', label: 'State', param: 'state' },
  { id: 'filter-request', field: 'request_id', label: 'Request', param: 'request' },
  { id: 'filter-template', field: 'template_id', label: 'Template', param: 'template' },
  { id: 'filter-node', field: 'node_name', label: 'Node', param: 'node' },
  { id: 'filter-namespace', field: 'namespace', label: 'Namespace', param: 'namespace' },
];
const MACHINE_COLUMNS = [
  { key: 'machine_id', label: 'Machine' },
  { key: 'status', label: 'State' },
  { key: 'status_reason', label: 'Reason' },
  { key: 'request_id', label: 'Request' },
  { key: 'template_id', label: 'Template' },
  { key: 'node_name', label: 'Node' },
  { key: 'namespace', label: 'Namespace' },
  { key: 'private_ip', label: 'IP' },
  { key: 'launch_time', label: 'Launched' },
];
const SEARCHED_FIELDS = ['machine_id', 'name', 'status', 'status_reason', 'request_id',
  'return_request_id', 'template_id', 'node_name', 'namespace', 'private_ip', 'public_ip'];

export function renderMachines(ctx, view, params) {
  const operator = canOperate();
  const state = {
    machines: [],
    byId: new Map(),
    signature: null, // of the machines on screen; null before the first load
    selected: new Set(),
    filters: {},
    search: '',
    sort: { key: 'launch_time', dir: -1 }, // newest first
    shown: [],
    optionKeys: {},
  };
  MACHINE_FILTERS.forEach((f) => { state.filters[f.field] = params.get(f.param) || ''; });

  view.innerHTML = `
      <div class="page-head"><h1>Machines</h1><p class="muted" id="machines-note" aria-live="polite"></p></div>
      <form class="card filters" id="machine-filters" role="search" aria-label="Filter machines">
        ${MACHINE_FILTERS.map((f) => `
          <div class="field"><label for="${f.id}">${esc(f.label)}</label>
            <select id="${f.id}" data-field="${f.field}"><option value="">All</option></select></div>`).join('')}
        <div class="field field-wide"><label for="machine-search">Search</label>
          <input id="machine-search" type="search" placeholder="id, reason, IP, node…" autocomplete="off"></div>
        <div class="field field-button"><button type="reset" class="btn btn-quiet" id="filters-clear">Clear filters</button></div>
      </form>
      <div class="toolbar">
        <span id="selection-count" class="muted" aria-live="polite">0 selected</span>
        ${operator ? '<button type="button" id="return-selected" class="btn btn-danger" disabled>Return selected</button>' : ''}
      </div>
      ${operator ? `
      <div id="return-step" class="card confirm" role="group" aria-labelledby="return-step-text" hidden>
        <p id="return-step-text"></p>
        <div class="confirm-actions">
          <button type="button" id="return-confirm" class="btn btn-danger">Return machines</button>
          <button type="button" id="return-cancel" class="btn">Keep them</button>
        </div>
      </div>
      <div id="return-result" class="notice" role="status" hidden></div>` : ''}
      <div class="table-wrap" tabindex="0" aria-label="Machines table">
        <table id="machines-table" class="data">
          <thead><tr>
            <th scope="col" class="sel"><input type="checkbox" id="select-all" aria-label="Select all shown machines"></th>
            ${MACHINE_COLUMNS.map((c) => `<th scope="col" data-key="${c.key}"><button type="button" class="sort" data-sort="${c.key}">${esc(c.label)}<span class="sort-mark" aria-hidden="true"></span></button></th>`).join('')}
          </tr></thead>
          <tbody><tr><td colspan="${MACHINE_COLUMNS.length + 1}" class="muted">Loading…</td></tr></tbody>
        </table>
      </div>`;

  const tbody = $('#machines-table tbody');
  const searchInput = $('#machine-search');
  searchInput.value = params.get('q') || '';
  state.search = searchInput.value.trim().toLowerCase();

  // --- events (delegated, so rebuilt rows need nothing attached)
  $('#machine-filters').addEventListener('change', (e) => {
    const field = e.target.dataset && e.target.dataset.field;
    if (!field) return;
    state.filters[field] = e.target.value;
    paintTable();
  });
  $('#machine-filters').addEventListener('submit', (e) => e.preventDefault());
  $('#machine-filters').addEventListener('reset', () => {
    setTimeout(() => { // after the browser reset the controls
      MACHINE_FILTERS.forEach((f) => { state.filters[f.field] = ''; });
      state.search = '';
      paintTable();
    });
  });
  let searchTimer = null;
  searchInput.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { state.search = searchInput.value.trim().toLowerCase(); paintTable(); }, 120);
  });
  $('#machines-table thead').addEventListener('click', (e) => {
    const button = e.target.closest('button.sort');
    if (!button) return;
    const key = button.dataset.sort;
    state.sort = state.sort.key === key ? { key, dir: -state.sort.dir } : { key, dir: 1 };
    paintTable();
  });
  $('#select-all').addEventListener('change', (e) => {
    state.shown.forEach((m) => (e.target.checked ? state.selected.add(m.machine_id) : state.selected.delete(m.machine_id)));
    $$('input.select-machine', tbody).forEach((box) => { box.checked = e.target.checked; });
    paintSelection();
  });
  tbody.addEventListener('change', (e) => {
    if (!e.target.classList.contains('select-machine')) return;
    if (e.target.checked) state.selected.add(e.target.value); else state.selected.delete(e.target.value);
    paintSelection();
  });
  tbody.addEventListener('click', (e) => {
    const link = e.target.closest('a.machine-link');
    if (!link) return;
    e.preventDefault();
    openMachineDrawer(ctx, state.byId.get(link.dataset.id) || { machine_id: link.dataset.id }, link);
  });
  if (operator) wireReturn(ctx, state, () => load());

  // --- data
  function machineSignature(list) {
    let s = '';
    for (const m of list) s += `${m.machine_id}|${m.status}|${m.status_reason}|${m.node_name}|${m.private_ip}|${m.return_request_id}\n`;
    return s;
  }

  async function load() {
    const machines = await fetchAllMachines(ctx.signal);
    if (!ctx.alive()) return;
    const signature = machineSignature(machines);
    if (signature === state.signature) return; // nothing changed: keep the DOM (and focus) as is
    state.signature = signature;
    state.machines = machines;
    state.byId = new Map(machines.map((m) => [m.machine_id, m]));
    // Forget selections of machines that are gone.
    state.selected.forEach((id) => { if (!state.byId.has(id)) state.selected.delete(id); });
    fillFilterOptions();
    paintTable();
    refreshDrawerFields(state.byId);
  }

  function fillFilterOptions() {
    const values = {};
    MACHINE_FILTERS.forEach((f) => { values[f.field] = new Set(); });
    for (const m of state.machines) {
      for (const f of MACHINE_FILTERS) values[f.field].add(m[f.field] == null || m[f.field] === '' ? NONE : m[f.field]);
    }
    for (const f of MACHINE_FILTERS) {
      const chosen = state.filters[f.field];
      if (chosen) values[f.field].add(chosen); // keep a filter from the URL even with no match
      const keys = Array.from(values[f.field]).sort((a, b) => COLLATOR.compare(a, b));
      const joined = keys.join('\n');
      if (state.optionKeys[f.field] === joined) continue; // rebuilding would close an open <select>
      state.optionKeys[f.field] = joined;
      const select = document.getElementById(f.id);
      select.innerHTML = '<option value="">All</option>' + keys.map((k) =>
        `<option value="${esc(k)}">${k === NONE ? '(none)' : esc(k)}</option>`).join('');
      select.value = chosen;
    }
  }

  function matches(m) {
    for (const f of MACHINE_FILTERS) {
      const want = state.filters[f.field];
      if (!want) continue;
      const have = m[f.field] == null || m[f.field] === '' ? NONE : m[f.field];
      if (have !== want) return false;
    }
    if (state.search) {
      let hay = '';
      for (const field of SEARCHED_FIELDS) if (m[field] != null) hay += `${m[field]} `;
      if (!hay.toLowerCase().includes(state.search)) return false;
    }
    return true;
  }

  function compareMachines(a, b) {
    const { key, dir } = state.sort;
    const x = a[key];
    const y = b[key];
    if (x == null || x === '') return y == null || y === '' ? COLLATOR.compare(a.machine_id, b.machine_id) : 1;
    if (y == null || y === '') return -1; // empty values last, whatever the direction
    return (COLLATOR.compare(String(x), String(y)) || COLLATOR.compare(a.machine_id, b.machine_id)) * dir;
  }

  function paintTable() {
    if (state.signature === null) return; // no data yet
    const matching = state.machines.filter(matches).sort(compareMachines);
    state.shown = matching.slice(0, MAX_TABLE_ROWS);
    // Keep keyboard focus on the same checkbox/link across a rebuild.
    const active = document.activeElement;
    const focusRow = active && tbody.contains(active) ? active.closest('tr') : null;
    const focusId = focusRow && focusRow.dataset.machineId;
    const focusClass = active && active.classList.contains('machine-link') ? 'a.machine-link' : 'input.select-machine';

    tbody.innerHTML = state.shown.length ? state.shown.map((m) => machineRow(m, state.selected.has(m.machine_id))).join('')
      : `<tr><td colspan="${MACHINE_COLUMNS.length + 1}" class="empty">${state.machines.length ? 'No machine matches the filter.' : 'No machines yet.'}</td></tr>`;

    if (focusId) {
      const row = tbody.querySelector(`tr[data-machine-id="${CSS.escape(focusId)}"]`);
      const target = row && row.querySelector(focusClass);
      if (target) target.focus();
    }
    $$('#machines-table thead th[data-key]').forEach((th) => {
      const sorted = th.dataset.key === state.sort.key;
      if (sorted) th.setAttribute('aria-sort', state.sort.dir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    });
    const total = state.machines.length;
    $('#machines-note').textContent = matching.length > state.shown.length
      ? `Showing ${state.shown.length} of ${matching.length} matching machines (${total} in all); refine the filter to see the rest.`
      : `${matching.length} of ${total} machines`;
    paintSelection();
    markRendered(ctx);
  }

  function paintSelection() {
    const n = state.selected.size;
    $('#selection-count').textContent = `${n} selected`;
    const all = $('#select-all');
    const shownSelected = state.shown.filter((m) => state.selected.has(m.machine_id)).length;
    all.checked = shownSelected > 0 && shownSelected === state.shown.length;
    all.indeterminate = shownSelected > 0 && shownSelected < state.shown.length;
    const button = $('#return-selected');
    if (button) {
      button.disabled = n === 0;
      button.textContent = n ? `Return selected (${n})` : 'Return selected';
    }
  }

  load().then(() => {
    const wanted = params.get('machine');
    if (wanted) openMachineDrawer(ctx, state.byId.get(wanted) || { machine_id: wanted }, null);
  }).catch(reportError).finally(() => repeat(ctx, load, 2000));
}

function machineRow(m, selected) {
  const id = esc(m.machine_id);
  const ip = m.private_ip || m.public_ip;
  return `<tr data-machine-id="${id}" class="row-${tone(m.status)}">` +
    `<td class="sel"><input type="checkbox" class="select-machine" value="${id}" aria-label="Select ${id}"${selected ? ' checked' : ''}></td>` +
    `<td class="id"><a class="machine-link" href="#/machines?machine=${esc(encodeURIComponent(m.machine_id))}" data-id="${id}">${id}</a></td>` +
    `<td class="state">${badge(m.status)}</td>` +
    `<td class="reason">${esc(m.status_reason || '')}</td>` +
    `<td class="request" title="${esc(m.request_id)}">${esc(shortId(m.request_id))}${m.return_request_id ? `<br><span class="muted" title="${esc(m.return_request_id)}">↩ ${esc(shortId(m.return_request_id))}</span>` : ''}</td>` +
    `<td class="template">${esc(m.template_id)}</td>` +
    `<td class="node">${esc(m.node_name || '')}</td>` +
    `<td class="namespace">${esc(m.namespace || '')}</td>` +
    `<td class="ip">${esc(ip || '')}</td>` +
    `<td class="launched">${timeHtml(m.launch_time)}</td></tr>`;
}

/** The "Return selected" button and its confirm step (operators only). */
function wireReturn(ctx, state, reload) {
  const step = $('#return-step');
  const result = $('#return-result');
  const openButton = $('#return-selected');
  const closeStep = (focusBack = true) => {
    step.hidden = true;
    if (focusBack) openButton.focus();
  };
  openButton.addEventListener('click', () => {
    const n = state.selected.size;
    if (!n) return;
    $('#return-step-text').textContent =
      `Return ${n} machine${n === 1 ? '' : 's'} to the cluster? orb deletes their Kubernetes objects; this cannot be undone.`;
    $('#return-confirm').textContent = `Return ${n} machine${n === 1 ? '' : 's'}`;
    result.hidden = true;
    step.hidden = false;
    $('#return-confirm').focus();
  });
  $('#return-cancel').addEventListener('click', () => closeStep());
  step.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.stopPropagation(); closeStep(); } });
  $('#return-confirm').addEventListener('click', async () => {
    const ids = Array.from(state.selected);
    const confirm = $('#return-confirm');
    confirm.disabled = true;
    try {
      const answer = await api('/api/v1/machines/return', { method: 'POST', json: { machine_ids: ids }, signal: ctx.signal });
      state.selected.clear();
      closeStep();
      result.innerHTML = `Return request <a href="#/requests?request=${esc(encodeURIComponent(answer.request_id || ''))}">${esc(answer.request_id)}</a> created` +
        `${answer.message ? `: ${esc(answer.message)}` : ''}.`;
      result.hidden = false;
      announce(`Return request ${answer.request_id || ''} created for ${ids.length} machines.`);
      state.signature = null; // force a repaint with the new states
      await reload();
    } catch (err) {
      reportError(err);
    } finally {
      confirm.disabled = false;
    }
  });
}

// ---------------------------------------------------------------- machine drawer

let drawer = { machineId: null, opener: null, controller: null };

const DRAWER_FIELDS = [
  ['machine_id', 'Machine'], ['name', 'Name'], ['status', 'State'], ['status_reason', 'Reason'],
  ['result', 'Result'], ['request_id', 'Request'], ['return_request_id', 'Return request'],
  ['template_id', 'Template'], ['provider_api', 'API'], ['instance_type', 'Instance type'],
  ['node_name', 'Node'], ['namespace', 'Namespace'], ['private_ip', 'Private IP'],
  ['public_ip', 'Public IP'], ['launch_time', 'Launched'], ['uptime_seconds', 'Up for'],
];

function drawerFieldsHtml(m) {
  let html = '';
  for (const [key, label] of DRAWER_FIELDS) {
    const v = m[key];
    if (v == null || v === '') continue;
    let shown = esc(v);
    if (key === 'status') shown = badge(v);
    else if (key === 'launch_time') shown = timeHtml(v);
    else if (key === 'uptime_seconds') shown = esc(fmtDuration(v));
    else if (key === 'request_id' || key === 'return_request_id') shown = `<a href="#/requests?request=${esc(encodeURIComponent(v))}">${esc(v)}</a>`;
    html += `<dt>${esc(label)}</dt><dd class="field-${esc(key)}${key === 'status_reason' ? ` reason tone-text-${tone(m.status)}` : ''}">${shown}</dd>`;
  }
  const entries = m.tags ? Object.entries(m.tags) : [];
  const tags = entries.length
    ? `<dt>Tags</dt><dd><details><summary>${entries.length} tags</summary><ul class="tags">` +
      `${entries.map(([k, v]) => `<li><code>${esc(k)}=${esc(v)}</code></li>`).join('')}</ul></details></dd>` : '';
  return html + tags;
}

function openMachineDrawer(ctx, machine, opener) {
  const panel = $('#machine-drawer');
  if (drawer.controller) drawer.controller.abort();
  drawer = { machineId: machine.machine_id, opener, controller: new AbortController() };
  ctx.signal.addEventListener('abort', () => drawer.controller && drawer.controller.abort(), { once: true });
  $('#drawer-title').textContent = machine.machine_id;
  $('#drawer-fields').innerHTML = drawerFieldsHtml(machine);
  $('#drawer-pod').innerHTML = '<p class="muted">Loading pod…</p>';
  $('#drawer-conditions').innerHTML = '';
  $('#drawer-events').innerHTML = '';
  panel.hidden = false;
  document.body.classList.add('drawer-open');
  $('#drawer-close').focus();
  loadPod(machine.machine_id, drawer.controller.signal);
}

function refreshDrawerFields(byId) {
  if (!drawer.machineId || $('#machine-drawer').hidden) return;
  const m = byId.get(drawer.machineId);
  if (m) $('#drawer-fields').innerHTML = drawerFieldsHtml(m);
}

async function loadPod(machineId, signal) {
  try {
    const pod = await api(`/api/v1/machines/${encodeURIComponent(machineId)}/pod`, { signal });
    if (signal.aborted) return;
    paintPod(pod);
  } catch (err) {
    if (isAbort(err) || signal.aborted) return;
    const text = err.status === 404
      ? `Pod details are not available (${err.message}).`
      : `Pod details could not be read: ${err.message}`;
    $('#drawer-pod').innerHTML = `<p class="notice notice-warn">${esc(text)}</p>`;
    $('#drawer-conditions').innerHTML = emptyHtml('No conditions to show.');
    $('#drawer-events').innerHTML = emptyHtml('No events to show.');
  }
}

function paintPod(pod) {
  const where = `${pod.namespace || '?'}/${pod.pod_name || '?'}`;
  $('#drawer-pod').innerHTML = pod.found === false
    ? `<p class="notice notice-warn">No pod <code>${esc(where)}</code> exists in the cluster.</p>`
    : `<dl class="fields"><dt>Pod</dt><dd><code>${esc(where)}</code></dd>` +
      `<dt>Phase</dt><dd>${badge(pod.phase)}</dd>` +
      `<dt>Node</dt><dd>${esc(pod.node_name || '—')}</dd></dl>`;
  const conditions = pod.conditions || [];
  $('#drawer-conditions').innerHTML = conditions.length ? `<div class="table-wrap"><table class="data compact"><thead><tr>
        <th scope="col">Type</th><th scope="col">Status</th><th scope="col">Reason</th><th scope="col">Message</th><th scope="col">Since</th></tr></thead><tbody>` +
    conditions.map((c) => `<tr class="${c.status === 'True' ? '' : 'row-wait'}"><td>${esc(c.type)}</td><td>${esc(c.status)}</td>` +
      `<td>${esc(c.reason || '')}</td><td>${esc(c.message || '')}</td><td>${timeHtml(c.last_transition_time)}</td></tr>`).join('') +
    '</tbody></table></div>' : emptyHtml('No conditions reported.');
  const events = pod.events || [];
  $('#drawer-events').innerHTML = events.length ? `<div class="table-wrap"><table class="data compact"><thead><tr>
        <th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th><th scope="col">Count</th><th scope="col">Last seen</th></tr></thead><tbody>` +
    events.map((e) => `<tr class="${e.type === 'Warning' ? 'row-bad' : ''}"><td>${esc(e.type || '')}</td><td>${esc(e.reason || '')}</td>` +
      `<td>${esc(e.message || '')}</td><td>${esc(e.count ?? '')}</td><td>${timeHtml(e.last_seen || e.first_seen)}</td></tr>`).join('') +
    '</tbody></table></div>' : emptyHtml('No events recorded for this pod.');
}

export function closeDrawer(restoreFocus = true) {
  const panel = $('#machine-drawer');
  if (panel.hidden) return;
  panel.hidden = true;
  document.body.classList.remove('drawer-open');
  if (drawer.controller) drawer.controller.abort();
  const opener = drawer.opener;
  drawer = { machineId: null, opener: null, controller: null };
  if (restoreFocus && opener && document.contains(opener)) opener.focus();
}
