// Overview page: alerts (failed / stuck machines), machines by state, requests by status,
// template usage, live machines per node and the recent-activity feed (an event stream).

import {
  $, esc, api, badge, tone, fmtAgo, fmtDuration, reportError, clearBanner, parseJson, ApiError,
  DATE_FORMAT, COLLATOR, fetchAllMachines, followEventStream, markRendered, repeat,
  usageHtml, applyBars, templateUsage,
} from './core.js';

const MACHINE_STATES = ['pending', 'launching', 'running', 'stopping', 'stopped',
  'shutting-down', 'terminated', 'failed', 'returned', 'unknown'];
const REQUEST_STATUSES = ['pending', 'acquiring', 'in_progress', 'partial_pending',
  'complete', 'partial', 'failed', 'timeout', 'cancelled'];
const STUCK_AFTER_SECONDS = 120;   // pending/launching longer than this is an alert
const ACTIVITY_MAX = 20;
const ALERTS_MAX = 50;

export function renderOverview(ctx, view) {
  view.innerHTML = `
      <div class="page-head"><h1>Overview</h1><p class="muted" id="overview-updated" aria-live="polite"></p></div>
      <section class="card card-alerts" aria-labelledby="alerts-title">
        <h2 id="alerts-title">Alerts</h2>
        <div id="alerts"><p class="muted">Loading…</p></div>
      </section>
      <div class="grid">
        <section class="card" aria-labelledby="mbs-title">
          <h2 id="mbs-title">Machines by state</h2>
          <ul id="machines-by-state" class="counts"></ul>
          <p class="muted small" id="machines-total"></p>
        </section>
        <section class="card" aria-labelledby="rbs-title">
          <h2 id="rbs-title">Requests by status</h2>
          <ul id="requests-by-status" class="counts"></ul>
          <p class="muted small" id="requests-total"></p>
        </section>
        <section class="card" aria-labelledby="tu-title">
          <h2 id="tu-title">Template usage</h2>
          <ul id="template-usage" class="bars"></ul>
        </section>
        <section class="card" aria-labelledby="nu-title">
          <h2 id="nu-title">Live machines per node</h2>
          <ul id="node-usage" class="bars scroll-list"></ul>
        </section>
      </div>
      <section class="card" aria-labelledby="act-title">
        <h2 id="act-title">Recent activity <span class="muted small">(last hour)</span></h2>
        <ol id="activity" class="activity" aria-live="polite"></ol>
      </section>`;

  const activity = followActivity(ctx);
  const refresh = async (first) => {
    const [dashboard, machines, templates] = await Promise.allSettled([
      api('/api/v1/system/dashboard', { signal: ctx.signal }),
      fetchAllMachines(ctx.signal),
      api('/api/v1/templates', { signal: ctx.signal }),
    ]);
    if (!ctx.alive()) return false;
    if (dashboard.status === 'fulfilled') paintDashboard(dashboard.value);
    if (machines.status === 'fulfilled') paintMachineSummary(summarizeMachines(machines.value));
    if (templates.status === 'fulfilled') paintTemplateUsage(templates.value.templates || []);
    const failure = [dashboard, machines, templates].find((r) => r.status === 'rejected');
    if (failure) reportError(failure.reason);
    else if (!first) clearBanner();
    $('#overview-updated').textContent = `Updated ${DATE_FORMAT.format(new Date())}`;
    if (!first) activity.repaint(); // keeps "3 min ago" true
    return !failure || dashboard.status === 'fulfilled' || machines.status === 'fulfilled';
  };

  refresh(true).then(async (painted) => {
    await activity.settled;
    if (painted) markRendered(ctx);
    repeat(ctx, () => refresh(false), 10000);
  }).catch(reportError);
}

function countsHtml(order, counts, attr, linkFor) {
  const keys = order.concat(Object.keys(counts || {}).filter((k) => !order.includes(k)));
  return keys.map((key) => {
    const n = (counts && counts[key]) || 0;
    const label = linkFor ? `<a href="${esc(linkFor(key))}">${esc(key)}</a>` : esc(key);
    return `<li ${attr}="${esc(key)}" class="${n ? '' : 'zero'}">` +
      `<span class="dot tone-${tone(key)}" aria-hidden="true"></span>` +
      `<span class="label">${label}</span><span class="count">${n}</span></li>`;
  }).join('');
}

function paintDashboard(d) {
  $('#machines-by-state').innerHTML = countsHtml(MACHINE_STATES, d.machines, 'data-state',
    (state) => `#/machines?state=${encodeURIComponent(state)}`);
  $('#requests-by-status').innerHTML = countsHtml(REQUEST_STATUSES, d.requests, 'data-status', null);
  $('#machines-total').textContent =
    `${d.total_machines ?? 0} machines in total, ${d.live_machines ?? 0} live`;
  $('#requests-total').textContent =
    `${d.total_requests ?? 0} requests in total, ${d.active_requests ?? 0} active`;
}

/**
 * One pass over all machines: live machines per node, failed ones and ones stuck in
 * pending/launching. "Live" follows the server's meaning (its object may still exist:
 * everything but terminated and returned). Age prefers the server's uptime_seconds so a
 * skewed browser clock cannot raise false alerts.
 */
function summarizeMachines(machines) {
  const now = Date.now();
  const nodes = new Map();
  const failed = [];
  const stuck = [];
  let unscheduled = 0;
  for (const m of machines) {
    const live = m.status !== 'terminated' && m.status !== 'returned';
    if (live) {
      if (m.node_name) nodes.set(m.node_name, (nodes.get(m.node_name) || 0) + 1);
      else unscheduled += 1;
    }
    if (m.status === 'failed') {
      failed.push(m);
    } else if (m.status === 'pending' || m.status === 'launching') {
      let age = typeof m.uptime_seconds === 'number' ? m.uptime_seconds : NaN;
      if (Number.isNaN(age)) age = (now - Date.parse(m.launch_time)) / 1000;
      if (age > STUCK_AFTER_SECONDS) stuck.push({ m, age });
    }
  }
  stuck.sort((a, b) => b.age - a.age);
  return { nodes, failed, stuck, unscheduled, total: machines.length };
}

function paintMachineSummary({ nodes, failed, stuck, unscheduled }) {
  const alertItem = (kind, m, extra) =>
    `<li class="alert alert-${kind}" data-alert="${kind}" data-machine="${esc(m.machine_id)}">` +
    `${badge(m.status)} <a href="#/machines?machine=${esc(encodeURIComponent(m.machine_id))}">${esc(m.machine_id)}</a>` +
    `${extra ? ` <span class="muted">${esc(extra)}</span>` : ''}` +
    `<span class="alert-reason">${esc(m.status_reason || 'no reason reported')}</span></li>`;
  const more = (n, state) => (n > ALERTS_MAX
    ? `<li class="more"><a href="#/machines?state=${state}">and ${n - ALERTS_MAX} more…</a></li>` : '');

  const groups = [];
  if (failed.length) {
    groups.push(`<div><h3>Failed machines (${failed.length})</h3><ul class="alerts">` +
      failed.slice(0, ALERTS_MAX).map((m) => alertItem('failed', m, m.template_id)).join('') +
      more(failed.length, 'failed') + '</ul></div>');
  }
  if (stuck.length) {
    groups.push(`<div><h3>Pending or launching for over ${STUCK_AFTER_SECONDS / 60} minutes (${stuck.length})</h3><ul class="alerts">` +
      stuck.slice(0, ALERTS_MAX).map(({ m, age }) => alertItem('stuck', m, `for ${fmtDuration(age)}`)).join('') +
      more(stuck.length, 'pending') + '</ul></div>');
  }
  $('#alerts').innerHTML = groups.length ? `<div class="two-col tight">${groups.join('')}</div>`
    : '<p class="all-clear">No failed or stuck machines.</p>';

  const rows = Array.from(nodes.entries()).sort((a, b) => b[1] - a[1] || COLLATOR.compare(a[0], b[0]));
  const max = rows.length ? rows[0][1] : 1;
  let nodeHtml = rows.map(([node, n]) =>
    `<li data-node="${esc(node)}"><span class="label">${esc(node)}</span>` +
    `<span class="bar" aria-hidden="true"><span data-pct="${Math.round((n / max) * 100)}"></span></span>` +
    `<span class="count">${n}</span></li>`).join('');
  if (unscheduled) {
    nodeHtml += `<li class="unscheduled"><span class="label muted">not on a node yet</span>` +
      `<span class="bar" aria-hidden="true"></span><span class="count">${unscheduled}</span></li>`;
  }
  $('#node-usage').innerHTML = nodeHtml || '<li class="empty">No live machines.</li>';
  applyBars($('#node-usage'));
}

function paintTemplateUsage(templates) {
  $('#template-usage').innerHTML = templates.map((t) => {
    const { used, max, level } = templateUsage(t);
    return `<li data-template="${esc(t.template_id)}" class="usage-${level}">` +
      `<span class="label" title="${esc(t.name || '')}">${esc(t.template_id)}</span>${usageHtml(used, max)}</li>`;
  }).join('') || '<li class="empty">No templates.</li>';
  applyBars($('#template-usage'));
}

/**
 * The activity feed: the server replays the last hour from /api/v1/events/, then
 * follows. The returned promise settles once the replay has gone quiet (or after 2 s),
 * so the page counts as rendered with the history on screen.
 */
function followActivity(ctx) {
  const list = $('#activity');
  const entries = [];
  const seen = new Set();
  let lastSeq = null;
  const since = new Date(Date.now() - 3600 * 1000).toISOString();
  let settle;
  const settled = new Promise((resolve) => { settle = resolve; });
  let quiet = null;
  let paintTimer = null;

  const paint = () => {
    paintTimer = null;
    list.innerHTML = entries.length ? entries.map(activityItem).join('')
      : '<li class="empty">No request activity in the last hour.</li>';
  };
  const schedulePaint = () => { if (!paintTimer) paintTimer = setTimeout(paint, 40); };
  const settleSoon = () => {
    clearTimeout(quiet);
    quiet = setTimeout(() => { if (paintTimer) { clearTimeout(paintTimer); paint(); } settle(); }, 150);
  };
  setTimeout(() => { if (!entries.length) paint(); settle(); }, 2000);

  followEventStream(
    () => (lastSeq != null ? `/api/v1/events/?since_seq=${lastSeq}` : `/api/v1/events/?since=${encodeURIComponent(since)}`),
    {
      signal: ctx.signal,
      onOpen: settleSoon,
      onEvent(frame) {
        if (frame.event === 'error') { reportError(new ApiError(0, parseJson(frame.data))); return; }
        const entry = parseJson(frame.data);
        if (!entry || entry.seq == null || seen.has(entry.seq)) return;
        seen.add(entry.seq);
        lastSeq = lastSeq == null ? entry.seq : Math.max(lastSeq, entry.seq);
        entries.push(entry);
        entries.sort((a, b) => b.seq - a.seq); // newest first
        entries.length = Math.min(entries.length, ACTIVITY_MAX);
        schedulePaint();
        settleSoon();
      },
    },
  ).finally(settle);
  return { settled, repaint: () => { if (entries.length) paint(); } };
}

function activityItem(e) {
  const change = e.previous_status
    ? `${badge(e.previous_status)} <span aria-label="to">→</span> ${badge(e.status)}` : badge(e.status);
  const kind = e.event_type === 'request.created' ? 'created' : 'status changed';
  return `<li data-seq="${esc(e.seq)}">` +
    `<span class="when" title="${esc(e.at)}">${esc(fmtAgo(e.at))}</span>` +
    `<span class="what"><a href="#/requests?request=${esc(encodeURIComponent(e.request_id || ''))}">${esc(e.request_id)}</a>` +
    ` <span class="muted">${esc(e.request_type || '')} ${esc(kind)}</span> ${change}</span>` +
    `${e.message ? `<span class="msg">${esc(e.message)}</span>` : ''}</li>`;
}
