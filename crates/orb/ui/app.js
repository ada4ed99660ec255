/*
 * orb console: the browser front end of `orb serve`.
 *
 * It only presents what the REST API of the same origin says (/api/v1/..., /readyz):
 * every number, state and verdict comes from the server. Plain ES2020, no bundler, no
 * external resources (clusters may be air-gapped).
 *
 * Security notes, because ids, reasons and messages come from users and from Kubernetes:
 *  - every value put into HTML goes through esc(); handlers are attached with
 *    addEventListener / delegation, never as inline attributes;
 *  - the bearer token lives in sessionStorage (this tab only), is sent as an
 *    Authorization header and is never written into the page or the URL.
 */
'use strict';

(function orbConsole() {
  // ---------------------------------------------------------------- constants

  const TOKEN_KEY = 'orb.token';
  const PAGES = {
    overview: 'Overview',
    machines: 'Machines',
    requests: 'Requests',
    templates: 'Templates',
    config: 'Configuration',
  };
  const MACHINE_STATES = ['pending', 'launching', 'running', 'stopping', 'stopped',
    'shutting-down', 'terminated', 'failed', 'returned', 'unknown'];
  const REQUEST_STATUSES = ['pending', 'acquiring', 'in_progress', 'partial_pending',
    'complete', 'partial', 'failed', 'timeout', 'cancelled'];
  // Colour family of each state/status (see app.css .tone-*).
  const TONE = {
    running: 'ok', complete: 'ok', ok: 'ok',
    pending: 'wait', launching: 'wait', acquiring: 'wait', in_progress: 'wait',
    partial_pending: 'wait', stopping: 'wait', 'shutting-down': 'wait',
    failed: 'bad', timeout: 'bad', error: 'bad', succeeded: 'ok',
    partial: 'warn', unknown: 'warn', degraded: 'warn', warn: 'warn', warning: 'warn',
    not_ready: 'bad', unready: 'bad', fail: 'bad',
    stopped: 'muted', terminated: 'muted', returned: 'muted', cancelled: 'muted',
  };
  const PAGE_SIZE = 1000;            // the server's largest page
  const MAX_TABLE_ROWS = 500;        // more rows than this only slow the browser down
  const STUCK_AFTER_SECONDS = 120;   // pending/launching longer than this is an alert
  const ACTIVITY_MAX = 20;
  const ALERTS_MAX = 50;
  // Browsers open ~6 HTTP/1.1 connections per origin and every event stream holds one;
  // keep a few free for ordinary calls.
  const REQUEST_STREAMS_MAX = 3;
  const NONE = ':none';              // <select> value for "field is empty" (no k8s name has ':')

  // ---------------------------------------------------------------- small helpers

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  const HTML_ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  /** Escapes any value for use in HTML text or a double-quoted attribute. */
  function esc(value) {
    return value == null ? '' : String(value).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
  }

  function isAbort(err) {
    return err && err.name === 'AbortError';
  }

  /** Resolves after ms, or early (without error) when the signal aborts. */
  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  function parseJson(text) {
    try { return JSON.parse(text); } catch (_) { return null; }
  }

  // One formatter for all dates: creating Intl objects per row is slow with many rows.
  const DATE_FORMAT = new Intl.DateTimeFormat(undefined, {
    year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
  // Tables show this year's dates without the year (the full time is in the title).
  const SHORT_DATE_FORMAT = new Intl.DateTimeFormat(undefined, {
    month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
  });
  const THIS_YEAR = new Date().getFullYear();
  const COLLATOR = new Intl.Collator(undefined, { numeric: true, sensitivity: 'base' });

  function fmtDate(iso) {
    if (!iso) return '';
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return (date.getFullYear() === THIS_YEAR ? SHORT_DATE_FORMAT : DATE_FORMAT).format(date);
  }

  /** A <time> element, or a dash for no time. */
  function timeHtml(iso) {
    if (!iso) return '<span class="muted">—</span>';
    return `<time datetime="${esc(iso)}" title="${esc(iso)}">${esc(fmtDate(iso))}</time>`;
  }

  function fmtAgo(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return '';
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 60) return `${s}s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }

  function fmtDuration(seconds) {
    if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '';
    const s = Math.round(seconds);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
    if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
    return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  }

  /** A config or field value as text: strings as they are, everything else as JSON. */
  function valueHtml(value) {
    if (value === null || value === undefined) return '<span class="muted">null</span>';
    if (typeof value === 'string') return `<code>${esc(value)}</code>`;
    return `<code>${esc(JSON.stringify(value))}</code>`;
  }

  function tone(status) {
    // Pod phases (Running, Pending, Failed, Succeeded) come capitalised.
    return TONE[status] || TONE[String(status).toLowerCase()] || 'muted';
  }

  /** A coloured pill for a machine state, request status or check status. */
  function badge(status) {
    const text = status == null || status === '' ? '—' : status;
    return `<span class="badge tone-${tone(status)}">${esc(text)}</span>`;
  }

  function listHtml(items, className = '') {
    if (!items || !items.length) return '';
    return `<ul class="${esc(className)}">${items.map((i) => `<li>${esc(i)}</li>`).join('')}</ul>`;
  }

  function emptyHtml(text) {
    return `<p class="empty">${esc(text)}</p>`;
  }

  function shortId(id) {
    return id && id.length > 22 ? `${id.slice(0, 12)}…${id.slice(-6)}` : id || '';
  }

  function announce(text) {
    const region = $('#announce');
    region.textContent = '';
    // A fresh text node after a tick makes screen readers read repeated messages too.
    setTimeout(() => { region.textContent = text; }, 30);
  }

  /** The hash route: `#/machines?state=failed` → {name: 'machines', params}. */
  function parseHash() {
    const match = /^#\/([a-z]+)(?:\?(.*))?$/.exec(location.hash || '');
    const name = match && PAGES[match[1]] ? match[1] : 'overview';
    return { name, params: new URLSearchParams(match && match[2] ? match[2] : '') };
  }

  // ---------------------------------------------------------------- session

  const session = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    me: null,
  };

  function canOperate() {
    return Boolean(session.me && Array.isArray(session.me.roles) && session.me.roles.includes('operator'));
  }

  function topRole(roles) {
    for (const role of ['admin', 'operator', 'viewer']) if ((roles || []).includes(role)) return role;
    return 'no role';
  }

  // ---------------------------------------------------------------- API calls

  /** A failed call, carrying the RFC 7807 problem document the server sent. */
  class ApiError extends Error {
    constructor(status, problem) {
      const title = (problem && problem.title) || `HTTP ${status}`;
      const detail = problem && problem.detail;
      super(detail ? `${title}: ${detail}` : title);
      this.name = 'ApiError';
      this.status = status;
      this.problem = problem || {};
    }
  }

  async function problemOf(res) {
    const body = parseJson(await res.text().catch(() => ''));
    if (body && typeof body === 'object') return body;
    return { title: res.statusText || `HTTP ${res.status}`, status: res.status };
  }

  /** fetch() with the bearer token; a 401 ends the session (except while signing in). */
  async function send(path, { method = 'GET', json, body, signal, accept = 'application/json', signingIn = false } = {}) {
    const headers = { Accept: accept };
    if (session.token) headers.Authorization = `Bearer ${session.token}`;
    let payload = body;
    if (json !== undefined) payload = JSON.stringify(json);
    if (payload !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, { method, headers, body: payload, signal, cache: 'no-store', credentials: 'same-origin' });
    } catch (err) {
      if (isAbort(err)) throw err;
      throw new ApiError(0, { title: 'Network error', detail: `${path} could not be reached (${err.message})` });
    }
    if (res.status === 401) {
      const problem = await problemOf(res);
      if (!signingIn) sessionExpired(problem);
      throw new ApiError(401, problem);
    }
    return res;
  }

  /** A JSON call; non-2xx answers become ApiError. */
  async function api(path, options = {}) {
    const res = await send(path, options);
    if (!res.ok) throw new ApiError(res.status, await problemOf(res));
    if (res.status === 204) return null;
    return res.json();
  }

  /** Shows a failed call in the error banner (ignoring aborts and 401s, which sign out). */
  function reportError(err) {
    if (!err || isAbort(err) || err.status === 401) return;
    console.warn('orb console:', err);
    showBanner(err.message || String(err));
  }

  function showBanner(text) {
    $('#error-text').textContent = text;
    $('#error-banner').hidden = false;
  }

  function clearBanner() {
    $('#error-banner').hidden = true;
    $('#error-text').textContent = '';
  }

  /**
   * All machines, page by page. The server's cursor is the next offset, so once the
   * first page tells the total the others are fetched a few at a time in parallel.
   */
  async function fetchAllMachines(signal) {
    const url = (extra) => `/api/v1/machines?limit=${PAGE_SIZE}&${extra}`;
    const first = await api(url('offset=0'), { signal });
    const pages = [first.machines || []];
    let cursor = first.next_cursor;
    const total = first.total_count;
    if (cursor != null && /^\d+$/.test(String(cursor)) && Number.isInteger(total)) {
      const offsets = [];
      for (let o = Number(cursor); o < total; o += PAGE_SIZE) offsets.push(o);
      const rest = await mapLimit(offsets, 3, (o) => api(url(`offset=${o}`), { signal }));
      rest.forEach((p) => pages.push(p.machines || []));
      cursor = rest.length ? rest[rest.length - 1].next_cursor : null; // the list grew meanwhile
    }
    while (cursor != null) {
      const p = await api(url(`cursor=${encodeURIComponent(cursor)}`), { signal });
      pages.push(p.machines || []);
      cursor = p.next_cursor;
    }
    // Offset paging over a changing list can repeat an entry; keep the first of each id.
    const seen = new Set();
    const all = [];
    for (const page of pages) {
      for (const m of page) {
        if (seen.has(m.machine_id)) continue;
        seen.add(m.machine_id);
        all.push(m);
      }
    }
    return all;
  }

  /** Runs fn over items with at most `limit` calls in flight, keeping the order. */
  async function mapLimit(items, limit, fn) {
    const results = new Array(items.length);
    let next = 0;
    const worker = async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i]);
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    return results;
  }

  // ---------------------------------------------------------------- server-sent events

  /**
   * Reads one text/event-stream response with fetch() (EventSource cannot send an
   * Authorization header) and calls onEvent({event, data, id}) per frame. Resolves when
   * the server ends the stream; rejects on errors.
   */
  async function readEventStream(path, { signal, onOpen, onEvent }) {
    const res = await send(path, { signal, accept: 'text/event-stream' });
    if (!res.ok) throw new ApiError(res.status, await problemOf(res));
    if (onOpen) onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let frame = { event: 'message', data: [], id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const lines = buffer.split('\n');
      buffer = lines.pop(); // the unfinished line, if any
      for (const raw of lines) {
        const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
        if (line === '') { // a blank line ends a frame
          if (frame.data.length) onEvent({ event: frame.event, id: frame.id, data: frame.data.join('\n') });
          frame = { event: 'message', data: [], id: null };
        } else if (!line.startsWith(':')) { // ':' lines are comments / keep-alives
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let text = colon < 0 ? '' : line.slice(colon + 1);
          if (text.startsWith(' ')) text = text.slice(1);
          if (field === 'data') frame.data.push(text);
          else if (field === 'event') frame.event = text;
          else if (field === 'id') frame.id = text;
        }
      }
    }
  }

  /**
   * Follows an event stream, reconnecting with a growing pause (1 s … 30 s) when it drops,
   * until `done()` says so or the signal aborts. `path()` is asked again before each
   * connection so the caller can resume where it was.
   */
  async function followEventStream(path, { signal, onEvent, onOpen, done = () => false }) {
    let pause = 1000;
    while (!signal.aborted && !done()) {
      try {
        await readEventStream(path(), {
          signal,
          onOpen,
          onEvent(frame) { pause = 1000; onEvent(frame); },
        });
      } catch (err) {
        if (isAbort(err) || signal.aborted || err.status === 401) return;
        // A bad or unknown request will not get better by asking again.
        if (err.status === 400 || err.status === 403 || err.status === 404) { reportError(err); return; }
      }
      if (done() || signal.aborted) return;
      await sleep(pause + Math.random() * 250, signal);
      pause = Math.min(pause * 2, 30000);
    }
  }

  // ---------------------------------------------------------------- page lifecycle

  let page = null; // the page on screen: {name, signal, alive(), stop()}

  function newPage(name) {
    const controller = new AbortController();
    const timers = new Set();
    return {
      name,
      signal: controller.signal,
      timers,
      cleanups: [],
      alive: () => !controller.signal.aborted,
      stop() {
        controller.abort();
        timers.forEach(clearTimeout);
        this.cleanups.forEach((fn) => fn());
      },
    };
  }

  function stopPage() {
    if (page) page.stop();
    page = null;
  }

  /** Marks the page as showing its first data (a hook for browser tests). */
  function markRendered(ctx) {
    if (!ctx.alive() || document.body.dataset.rendered === ctx.name) return;
    document.body.dataset.rendered = ctx.name;
    window.orbRenderedAt = performance.now();
  }

  /**
   * Runs task again and again, at least minMs apart and longer when the task itself is
   * slow (a big cluster is not hammered), skipping while the tab is hidden.
   */
  function repeat(ctx, task, minMs, factor = 3) {
    let failing = false;
    const loop = async () => {
      if (!ctx.alive()) return;
      const started = performance.now();
      if (!document.hidden) {
        try {
          await task();
          if (failing) clearBanner(); // the server answers again: the old error is history
          failing = false;
        } catch (err) {
          if (ctx.alive()) { reportError(err); failing = !isAbort(err); }
        }
      }
      if (!ctx.alive()) return;
      const wait = Math.max(minMs, (performance.now() - started) * factor);
      const timer = setTimeout(() => { ctx.timers.delete(timer); loop(); }, wait);
      ctx.timers.add(timer);
    };
    const timer = setTimeout(() => { ctx.timers.delete(timer); loop(); }, minMs);
    ctx.timers.add(timer);
  }

  const RENDERERS = {
    overview: renderOverview,
    machines: renderMachines,
    requests: renderRequests,
    templates: renderTemplates,
    config: renderConfig,
  };

  /** Shows the page the hash names; `focus` moves focus to its heading (after a click). */
  function route(focus = false) {
    if (!session.me) return;
    const { name, params } = parseHash();
    stopPage();
    closeDrawer(false);
    clearBanner();
    delete document.body.dataset.rendered;
    $$('a[data-nav]').forEach((a) => {
      if (a.dataset.nav === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    });
    document.title = `${PAGES[name]} · orb console`;
    const view = $('#view');
    view.innerHTML = '';
    page = newPage(name);
    RENDERERS[name](page, view, params);
    if (focus) {
      const heading = $('h1', view);
      if (heading) { heading.tabIndex = -1; heading.focus(); }
    }
  }

  // ---------------------------------------------------------------- sign in / out

  function showLogin(message) {
    stopPage();
    closeDrawer(false);
    session.me = null;
    delete document.body.dataset.rendered;
    $('#view').innerHTML = '';
    $('#view').hidden = true;
    $('#nav').hidden = true;
    $('#session').hidden = true;
    $('#whoami').textContent = '';
    $('#login-form').hidden = false;
    const error = $('#login-error');
    error.textContent = message || '';
    error.hidden = !message;
    document.title = 'Sign in · orb console';
    $('#login-token').focus();
  }

  function showApp() {
    const me = session.me;
    $('#login-form').hidden = true;
    $('#view').hidden = false;
    $('#nav').hidden = false;
    $('#session').hidden = false;
    const role = topRole(me.roles);
    const auth = me.authenticated ? '' : ' · no auth';
    $('#whoami').textContent = `${me.username || 'unknown'} (${role})${auth}`;
  }

  /** Asks the server who the token belongs to; true when the console may be shown. */
  async function loadIdentity() {
    try {
      session.me = await api('/api/v1/me', { signingIn: true });
      return true;
    } catch (err) {
      if (err.status === 401) return false;
      throw err;
    }
  }

  async function startConsole() {
    try {
      if (await loadIdentity()) {
        showApp();
        route();
      } else {
        showLogin(session.token ? 'The saved token was refused; sign in again.' : '');
      }
    } catch (err) {
      // The server is unreachable or broken: say so, and offer the form to retry.
      showLogin(err.message);
    }
  }

  async function onLoginSubmit(event) {
    event.preventDefault();
    const input = $('#login-token');
    const token = input.value.trim();
    const error = $('#login-error');
    if (!token) {
      error.textContent = 'Enter a bearer token.';
      error.hidden = false;
      input.focus();
      return;
    }
    const button = $('#login-submit');
    button.disabled = true;
    session.token = token;
    try {
      if (await loadIdentity()) {
        sessionStorage.setItem(TOKEN_KEY, token);
        input.value = '';
        error.hidden = true;
        showApp();
        route(true);
      } else {
        session.token = '';
        error.textContent = 'The server refused this token (401). Check that it is valid and not expired.';
        error.hidden = false;
        input.select();
      }
    } catch (err) {
      session.token = '';
      error.textContent = err.message;
      error.hidden = false;
    } finally {
      button.disabled = false;
    }
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    session.token = '';
    clearBanner();
    showLogin('Signed out.');
  }

  /** A call answered 401 while signed in: the token expired or was revoked. */
  function sessionExpired(problem) {
    if (!session.me) return;
    sessionStorage.removeItem(TOKEN_KEY);
    session.token = '';
    const why = problem && (problem.detail || problem.title);
    showLogin(`Your session ended${why ? ` (${why})` : ''}; sign in again.`);
  }

  // ================================================================ Overview

  function renderOverview(ctx, view) {
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

  function usageHtml(used, max) {
    if (!Number.isFinite(used) || !Number.isFinite(max) || max <= 0) {
      return `<span class="usage-text">${Number.isFinite(used) ? used : '?'} / ${Number.isFinite(max) ? max : '?'}</span>`;
    }
    const pct = Math.min(100, Math.round((used / max) * 100));
    const level = used >= max ? 'full' : used / max >= 0.8 ? 'warn' : 'ok';
    return `<span class="bar level-${level}" aria-hidden="true"><span data-pct="${pct}"></span></span>` +
      `<span class="usage-text level-${level}">${used} / ${max}</span>`;
  }

  /**
   * Sets bar widths from data-pct. The server's Content-Security-Policy (style-src 'self')
   * ignores style="" attributes in markup, but styles set from script are allowed.
   */
  function applyBars(root) {
    $$('[data-pct]', root).forEach((el) => { el.style.width = `${Number(el.dataset.pct) || 0}%`; });
  }

  function templateUsage(t) {
    const max = Number(t.max_instances);
    const used = max - Number(t.available_number);
    return { used, max, level: max > 0 && used / max >= 0.8 ? (used >= max ? 'full' : 'warn') : 'ok' };
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

  // ================================================================ Machines

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

  function renderMachines(ctx, view, params) {
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

  function closeDrawer(restoreFocus = true) {
    const panel = $('#machine-drawer');
    if (panel.hidden) return;
    panel.hidden = true;
    document.body.classList.remove('drawer-open');
    if (drawer.controller) drawer.controller.abort();
    const opener = drawer.opener;
    drawer = { machineId: null, opener: null, controller: null };
    if (restoreFocus && opener && document.contains(opener)) opener.focus();
  }

  // ================================================================ Requests

  /** One shape for a request row, from a list item or from a RequestDetail. */
  function requestFromItem(r) {
    return {
      request_id: r.request_id,
      request_type: r.request_type,
      template_id: r.template_id,
      status: r.status,
      requested: r.requested_count ?? 0,
      successful: r.successful_count ?? 0,
      failed: r.failed_count ?? 0,
      created_at: r.created_at,
      completed_at: r.completed_at,
      message: r.message,
      terminal: Boolean(r.is_terminal),
    };
  }

  function requestFromDetail(detail) {
    const r = detail && detail.request;
    if (!r) {
      const item = detail && Array.isArray(detail.requests) ? detail.requests[0] : null;
      return item ? requestFromItem(item) : null;
    }
    return {
      request_id: r.request_id,
      request_type: r.request_type,
      template_id: r.template_id,
      status: r.status,
      requested: r.requested_count ?? 0,
      successful: r.fulfilled_count ?? 0,
      failed: r.failed_count ?? 0,
      created_at: r.created_at,
      completed_at: r.completed_at,
      message: r.status_message,
      terminal: Boolean(r.terminal),
    };
  }

  function progressHtml(r) {
    const max = Math.max(1, r.requested);
    return `<progress class="request-progress" max="${max}" value="${Math.min(r.successful, max)}" ` +
      `aria-label="${esc(`${r.successful} of ${r.requested}`)}"></progress>` +
      `<span class="progress-text">${esc(r.successful)} / ${esc(r.requested)}</span>` +
      `${r.failed ? ` <span class="failed-count">${esc(r.failed)} failed</span>` : ''}`;
  }

  function cancelHtml(r) {
    return r.request_type === 'acquire' && !r.terminal
      ? `<button type="button" class="btn btn-small cancel-request" data-id="${esc(r.request_id)}">Cancel</button>` : '';
  }

  function requestRow(r, operator) {
    const id = esc(r.request_id);
    return `<tr data-request-id="${id}" class="${r.terminal ? '' : 'live'}">` +
      `<td class="id"><a class="request-link" href="#/requests?request=${esc(encodeURIComponent(r.request_id))}" data-id="${id}">${id}</a>` +
      `<span class="type type-${esc(r.request_type)}">${esc(r.request_type)}</span></td>` +
      `<td class="template">${r.template_id ? esc(r.template_id) : '<span class="muted">—</span>'}</td>` +
      `<td class="status">${badge(r.status)}</td>` +
      `<td class="progress">${progressHtml(r)}</td>` +
      `<td class="created">${timeHtml(r.created_at)}</td>` +
      `<td class="message">${esc(r.message || '')}</td>` +
      `${operator ? `<td class="actions">${cancelHtml(r)}</td>` : ''}</tr>`;
  }

  /** Updates the cells of an existing row in place (keeps focus and scroll). */
  function updateRequestRow(tr, r, operator) {
    tr.classList.toggle('live', !r.terminal);
    $('td.status', tr).innerHTML = badge(r.status);
    const bar = $('progress.request-progress', tr);
    bar.max = Math.max(1, r.requested);
    bar.value = Math.min(r.successful, bar.max);
    bar.setAttribute('aria-label', `${r.successful} of ${r.requested}`);
    $('.progress-text', tr).textContent = `${r.successful} / ${r.requested}`;
    const failed = $('.failed-count', tr);
    if (r.failed && failed) failed.textContent = `${r.failed} failed`;
    else if (r.failed) bar.parentElement.insertAdjacentHTML('beforeend', ` <span class="failed-count">${esc(r.failed)} failed</span>`);
    else if (failed) failed.remove();
    $('td.message', tr).textContent = r.message || '';
    if (operator) {
      const cell = $('td.actions', tr);
      const hadFocus = cell.contains(document.activeElement);
      if (r.terminal || r.request_type !== 'acquire') cell.innerHTML = '';
      else if (!$('button.cancel-request', cell)) cell.innerHTML = cancelHtml(r);
      if (hadFocus && !cell.contains(document.activeElement)) $('a.request-link', tr).focus();
    }
  }

  function renderRequests(ctx, view, params) {
    const operator = canOperate();
    const rows = new Map(); // request id -> model
    let selectedId = params.get('request') || null;
    const timelineSeqs = new Set();

    view.innerHTML = `
      <div class="page-head"><h1>Requests</h1><p class="muted" id="requests-note" aria-live="polite"></p></div>
      ${operator ? `
      <section class="card" aria-labelledby="request-form-title">
        <h2 id="request-form-title">Request machines</h2>
        <form id="request-form" class="inline-form">
          <div class="field"><label for="request-template">Template</label>
            <select id="request-template" name="template_id" required><option value="">Loading…</option></select></div>
          <div class="field field-narrow"><label for="request-count">Count</label>
            <input id="request-count" name="machine_count" type="number" min="1" step="1" value="1" required inputmode="numeric"></div>
          <div class="field field-button"><button id="request-submit" type="submit" class="btn btn-primary">Request machines</button></div>
        </form>
        <div id="request-created" class="notice" role="status" hidden></div>
      </section>` : ''}
      <section class="card" aria-labelledby="requests-title">
        <h2 id="requests-title">Requests <span class="muted small">newest first</span></h2>
        <div id="requests-message" class="notice" role="status" hidden></div>
        <div class="table-wrap" tabindex="0" aria-label="Requests table">
          <table id="requests-table" class="data">
            <thead><tr><th scope="col">Request <span class="small">/ type</span></th><th scope="col">Template</th>
              <th scope="col">Status</th><th scope="col">Progress</th><th scope="col">Created</th>
              <th scope="col">Message</th>${operator ? '<th scope="col"><span class="sr-only">Actions</span></th>' : ''}</tr></thead>
            <tbody><tr><td colspan="7" class="muted">Loading…</td></tr></tbody>
          </table>
        </div>
      </section>
      <section class="card" id="request-detail" aria-labelledby="request-detail-title" hidden>
        <h2 id="request-detail-title" tabindex="-1">Timeline</h2>
        <ol id="request-timeline" class="timeline"></ol>
      </section>`;

    const tbody = $('#requests-table tbody');
    const pool = createStreamPool(ctx, REQUEST_STREAMS_MAX, (r) => upsert(r));

    function rowOf(id) {
      return tbody.querySelector(`tr[data-request-id="${CSS.escape(id)}"]`);
    }

    /** Shows a request: updates its row or adds it on top; follows it while not terminal. */
    function upsert(r, follow = true) {
      if (!r || !r.request_id) return;
      const known = rows.has(r.request_id);
      rows.set(r.request_id, r);
      const tr = known ? rowOf(r.request_id) : null;
      if (tr) {
        updateRequestRow(tr, r, operator);
      } else {
        const empty = $('td.empty', tbody);
        if (empty) empty.parentElement.remove();
        tbody.insertAdjacentHTML('afterbegin', requestRow(r, operator));
      }
      if (follow && !r.terminal) pool.want(r.request_id, !known);
      paintNote();
    }

    function paintNote(total) {
      if (total != null) paintNote.total = total;
      const shown = rows.size;
      const all = Math.max(paintNote.total || 0, shown);
      $('#requests-note').textContent = all > shown ? `Showing the newest ${shown} of ${all} requests.` : `${shown} requests`;
    }

    function showRequestsMessage(text) {
      const box = $('#requests-message');
      box.textContent = text;
      box.hidden = false;
    }

    async function fetchOne(id) {
      const detail = await api(`/api/v1/requests/${encodeURIComponent(id)}/status`, { signal: ctx.signal });
      return requestFromDetail(detail);
    }

    async function loadList(first) {
      const list = await api('/api/v1/requests?limit=200', { signal: ctx.signal });
      if (!ctx.alive()) return;
      const items = (list.requests || []).map(requestFromItem);
      if (first) {
        items.forEach((r) => rows.set(r.request_id, r));
        tbody.innerHTML = items.length ? items.map((r) => requestRow(r, operator)).join('')
          : `<tr><td colspan="7" class="empty">No requests yet.</td></tr>`;
        items.forEach((r) => { if (!r.terminal) pool.want(r.request_id); });
      } else {
        // Catch up on rows without a live stream (more running requests than streams),
        // oldest first so that new ones end on top.
        items.slice().reverse().forEach((r) => { if (!pool.isFollowed(r.request_id)) upsert(r); });
      }
      paintNote(list.total_count);
    }

    // --- timeline of the selected request
    async function showTimeline(id, focus) {
      selectedId = id;
      timelineSeqs.clear();
      $$('tr.selected', tbody).forEach((tr) => { tr.classList.remove('selected'); tr.removeAttribute('aria-current'); });
      const tr = rowOf(id);
      if (tr) { tr.classList.add('selected'); tr.setAttribute('aria-current', 'true'); }
      const section = $('#request-detail');
      section.hidden = false;
      $('#request-detail-title').textContent = `Timeline of ${id}`;
      const list = $('#request-timeline');
      list.innerHTML = '<li class="muted">Loading…</li>';
      if (focus) $('#request-detail-title').focus();
      try {
        const answer = await api(`/api/v1/requests/${encodeURIComponent(id)}/timeline`, { signal: ctx.signal });
        if (selectedId !== id) return;
        const entries = answer.timeline || [];
        entries.forEach((e) => timelineSeqs.add(e.seq));
        list.innerHTML = entries.length ? entries.slice().reverse().map(timelineItem).join('')
          : '<li class="empty">No events recorded.</li>';
      } catch (err) {
        if (selectedId === id) list.innerHTML = `<li class="notice notice-warn">${esc(err.message)}</li>`;
      }
    }

    function appendTimeline(entry) {
      if (entry.request_id !== selectedId || timelineSeqs.has(entry.seq)) return;
      timelineSeqs.add(entry.seq);
      const list = $('#request-timeline');
      const empty = $('li.empty', list);
      if (empty) empty.remove();
      list.insertAdjacentHTML('afterbegin', timelineItem(entry));
    }

    tbody.addEventListener('click', (e) => {
      const cancel = e.target.closest('button.cancel-request');
      if (cancel) { cancelRequest(cancel); return; }
      const link = e.target.closest('a.request-link');
      const tr = e.target.closest('tr[data-request-id]');
      if (!tr || (e.target.closest('a, button, input') && !link)) return;
      e.preventDefault();
      showTimeline(tr.dataset.requestId, Boolean(link));
    });

    async function cancelRequest(button) {
      const id = button.dataset.id;
      button.disabled = true;
      try {
        // The answer is the request as it now stands (a RequestDetail).
        const answer = await api(`/api/v1/requests/${encodeURIComponent(id)}/cancel`, { method: 'POST', signal: ctx.signal });
        const r = requestFromDetail(answer) || await fetchOne(id);
        upsert(r);
        showRequestsMessage(`Request ${id} is ${r.status}${r.message ? `: ${r.message}` : '.'}`);
      } catch (err) {
        reportError(err);
        if (document.contains(button)) button.disabled = false;
        // 409 (already finished) and the like: show where it stands now.
        if (err.status && err.status !== 401) fetchOne(id).then((r) => upsert(r)).catch(() => {});
      }
    }

    // --- the request form
    if (operator) {
      api('/api/v1/templates', { signal: ctx.signal }).then((answer) => {
        const select = $('#request-template');
        const templates = answer.templates || [];
        select.innerHTML = templates.length ? templates.map((t) =>
          `<option value="${esc(t.template_id)}">${esc(t.template_id)}${t.name ? ` — ${esc(t.name)}` : ''}` +
          `${t.available_number != null ? ` (${esc(t.available_number)} available)` : ''}</option>`).join('')
          : '<option value="">No templates</option>';
      }).catch(reportError);

      $('#request-form').addEventListener('submit', async (e) => {
        e.preventDefault();
        const form = e.currentTarget;
        if (!form.reportValidity()) return;
        const button = $('#request-submit');
        const created = $('#request-created');
        button.disabled = true;
        try {
          const answer = await api('/api/v1/machines/request', {
            method: 'POST',
            signal: ctx.signal,
            json: { template_id: $('#request-template').value, machine_count: Number($('#request-count').value) },
          });
          created.innerHTML = `Request <a class="request-link" href="#/requests?request=${esc(encodeURIComponent(answer.request_id || ''))}">` +
            `<code>${esc(answer.request_id)}</code></a> created${answer.message ? `: ${esc(answer.message)}` : '.'}`;
          created.hidden = false;
          if (answer.request_id) upsert(await fetchOne(answer.request_id));
        } catch (err) {
          reportError(err);
        } finally {
          button.disabled = false;
        }
      });
      $('#request-created').addEventListener('click', (e) => {
        const link = e.target.closest('a.request-link');
        if (!link) return;
        e.preventDefault();
        const id = new URLSearchParams(link.getAttribute('href').split('?')[1]).get('request');
        if (id) showTimeline(id, true);
      });
    }

    // --- the global feed: new requests and status changes of rows without a stream
    let lastSeq = null;
    followEventStream(() => (lastSeq != null ? `/api/v1/events/?since_seq=${lastSeq}` : '/api/v1/events/'), {
      signal: ctx.signal,
      onEvent(frame) {
        const entry = parseJson(frame.data);
        if (frame.event === 'error' || !entry || !entry.request_id) return;
        if (entry.seq != null) lastSeq = lastSeq == null ? entry.seq : Math.max(lastSeq, entry.seq);
        appendTimeline(entry);
        if (!pool.isFollowed(entry.request_id)) fetchOne(entry.request_id).then((r) => upsert(r)).catch(reportError);
      },
    });

    loadList(true).then(() => {
      markRendered(ctx);
      if (selectedId) showTimeline(selectedId, false);
      repeat(ctx, () => loadList(false), 5000);
    }).catch(reportError);
  }

  function timelineItem(e) {
    const change = e.previous_status
      ? `${badge(e.previous_status)} <span aria-label="to">→</span> ${badge(e.status)}` : badge(e.status);
    return `<li data-seq="${esc(e.seq)}">${timeHtml(e.at)} <span class="event-type">${esc(e.event_type)}</span> ${change}` +
      `${e.message ? `<span class="msg">${esc(e.message)}</span>` : ''}</li>`;
  }

  /**
   * Live progress of a few non-terminal requests over their own event streams (each
   * stream ends by itself after a terminal status). A request made or noticed now goes
   * first: when all streams are busy it takes over the one followed longest, whose
   * request waits in line again (its row is still refreshed by the list poll).
   */
  function createStreamPool(ctx, max, onUpdate) {
    const active = new Map(); // id -> AbortController, oldest first
    const queue = [];

    function want(id, urgent = false) {
      if (active.has(id) || queue.includes(id)) return;
      if (urgent) {
        queue.unshift(id);
        if (active.size >= max) {
          const [oldest, controller] = active.entries().next().value;
          active.delete(oldest);
          controller.abort();
          queue.push(oldest);
        }
      } else {
        queue.push(id);
      }
      pump();
    }

    function pump() {
      while (active.size < max && queue.length && ctx.alive()) {
        const id = queue.shift();
        const controller = new AbortController();
        const stop = () => controller.abort();
        ctx.signal.addEventListener('abort', stop, { once: true });
        active.set(id, controller);
        follow(id, controller.signal).catch(reportError).finally(() => {
          ctx.signal.removeEventListener('abort', stop);
          if (active.get(id) === controller) active.delete(id);
          pump();
        });
      }
    }

    async function follow(id, signal) {
      let terminal = false;
      await followEventStream(() => `/api/v1/requests/${encodeURIComponent(id)}/events`, {
        signal,
        done: () => terminal,
        onEvent(frame) {
          if (frame.event === 'error') { reportError(new ApiError(0, parseJson(frame.data))); return; }
          const r = requestFromDetail(parseJson(frame.data)); // the closing frame is `{}`
          if (!r) return;
          terminal = r.terminal;
          onUpdate(r);
        },
      });
    }

    return { want, isFollowed: (id) => active.has(id) };
  }

  // ================================================================ Templates

  function renderTemplates(ctx, view) {
    let selectedId = null;
    let selectToken = 0;
    view.innerHTML = `
      <div class="page-head"><h1>Templates</h1><p class="muted" id="templates-note" aria-live="polite"></p></div>
      <section class="card">
        <div class="table-wrap" tabindex="0" aria-label="Templates table">
          <table id="templates-table" class="data selectable">
            <thead><tr><th scope="col">Template</th><th scope="col">Name</th><th scope="col">API</th>
              <th scope="col">Image</th><th scope="col">Used / max</th><th scope="col">Problems</th></tr></thead>
            <tbody><tr><td colspan="6" class="muted">Loading…</td></tr></tbody>
          </table>
        </div>
      </section>
      <p id="template-hint" class="muted">Select a template to preview the Kubernetes objects it renders and to validate it.</p>
      <div id="template-detail" class="two-col" hidden>
        <section class="card" aria-labelledby="render-title">
          <h2 id="render-title" tabindex="-1">Rendered objects</h2>
          <form id="render-form" class="inline-form">
            <div class="field field-narrow"><label for="render-count">Machines</label>
              <input id="render-count" type="number" min="1" max="100" step="1" value="1" inputmode="numeric"></div>
            <div class="field field-button"><button type="submit" class="btn" id="render-submit">Render</button></div>
          </form>
          <div id="template-problems"></div>
          <div id="template-render" aria-live="polite"></div>
        </section>
        <section class="card" aria-labelledby="validate-title">
          <h2 id="validate-title">Validate</h2>
          <label for="validate-input">Templates document (JSON)</label>
          <textarea id="validate-input" rows="18" spellcheck="false" autocomplete="off"></textarea>
          <div class="form-actions"><button type="button" id="validate-submit" class="btn btn-primary">Validate</button></div>
          <div id="validate-result" aria-live="polite"></div>
        </section>
      </div>`;

    const tbody = $('#templates-table tbody');
    let templates = [];

    function templateRow(t) {
      const { used, max } = templateUsage(t);
      const problems = (t.problems || []).length;
      return `<tr data-template-id="${esc(t.template_id)}">` +
        `<td class="id"><button type="button" class="link template-select" data-id="${esc(t.template_id)}">${esc(t.template_id)}</button></td>` +
        `<td>${esc(t.name || '')}</td><td>${esc(t.provider_api || '')}</td><td><code>${esc(t.image_id || '')}</code></td>` +
        `<td class="usage"><div class="usage-cell">${usageHtml(used, max)}</div></td>` +
        `<td class="problems">${problems ? `<span class="badge tone-bad">${problems}</span>` : '<span class="muted">0</span>'}</td></tr>`;
    }

    tbody.addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-template-id]');
      if (tr) select(tr.dataset.templateId, Boolean(e.target.closest('button')));
    });
    $('#render-form').addEventListener('submit', (e) => {
      e.preventDefault();
      if (selectedId) loadRender(selectedId, selectToken);
    });
    $('#validate-submit').addEventListener('click', validate);

    async function select(id, focus) {
      selectedId = id;
      const token = ++selectToken;
      $$('tr[data-template-id]', tbody).forEach((tr) => {
        const on = tr.dataset.templateId === id;
        tr.classList.toggle('selected', on);
        if (on) tr.setAttribute('aria-current', 'true'); else tr.removeAttribute('aria-current');
      });
      $('#template-hint').hidden = true;
      $('#template-detail').hidden = false;
      $('#render-title').textContent = `Rendered objects of ${id}`;
      $('#validate-result').innerHTML = '';
      const item = templates.find((t) => t.template_id === id);
      $('#template-problems').innerHTML = item && (item.problems || []).length
        ? `<div class="notice notice-bad"><strong>Problems</strong>${listHtml(item.problems)}</div>` : '';
      if (focus) $('#render-title').focus();
      const input = $('#validate-input');
      input.value = '';
      loadRender(id, token);
      try {
        const detail = await api(`/api/v1/templates/${encodeURIComponent(id)}`, { signal: ctx.signal });
        // Prefill only if nothing was typed (or pasted) while the template was loading.
        if (token !== selectToken || input.value !== '') return;
        input.value = JSON.stringify({ templates: [detail.template || {}] }, null, 2);
      } catch (err) {
        if (token === selectToken) reportError(err);
      }
    }

    async function loadRender(id, token) {
      const target = $('#template-render');
      const count = Math.min(100, Math.max(1, Number($('#render-count').value) || 1));
      target.innerHTML = '<p class="muted">Rendering…</p>';
      try {
        const r = await api(`/api/v1/templates/${encodeURIComponent(id)}/render?count=${count}`, { signal: ctx.signal });
        if (token !== selectToken) return;
        const bodies = r.bodies || [];
        target.innerHTML =
          (r.ok === false ? '<p class="verdict verdict-bad">This template cannot be rendered.</p>' : '') +
          (r.path ? `<p class="muted small">Path: <code>${esc(r.path)}</code></p>` : '') +
          ((r.problems || []).length ? `<div class="notice notice-bad"><strong>Problems</strong>${listHtml(r.problems, 'render-problems')}</div>` : '') +
          ((r.warnings || []).length ? `<div class="notice notice-warn"><strong>Warnings</strong>${listHtml(r.warnings, 'render-warnings')}</div>` : '') +
          (bodies.length ? bodies.map((b) => {
            const name = `${b.kind || 'object'} ${(b.metadata && (b.metadata.name || b.metadata.generateName)) || ''}`;
            return `<h3 class="body-title">${esc(name)}</h3><pre class="code" tabindex="0">${esc(JSON.stringify(b, null, 2))}</pre>`;
          }).join('') : emptyHtml('No objects rendered.'));
      } catch (err) {
        if (token !== selectToken || isAbort(err)) return;
        target.innerHTML = `<p class="notice notice-warn">${esc(err.status === 404
          ? `The render preview is not available (${err.message}).` : err.message)}</p>`;
      }
    }

    async function validate() {
      const result = $('#validate-result');
      const button = $('#validate-submit');
      button.disabled = true;
      result.innerHTML = '<p class="muted">Validating…</p>';
      try {
        // The text goes as typed: the server's parser reports JSON mistakes precisely.
        const report = await api('/api/v1/templates/validate', { method: 'POST', body: $('#validate-input').value, signal: ctx.signal });
        result.innerHTML = validationHtml(report);
      } catch (err) {
        if (!isAbort(err)) result.innerHTML = `<div class="notice notice-bad">${esc(err.message)}</div>`;
      } finally {
        button.disabled = false;
      }
    }

    api('/api/v1/templates', { signal: ctx.signal }).then((answer) => {
      templates = answer.templates || [];
      tbody.innerHTML = templates.length ? templates.map(templateRow).join('')
        : '<tr><td colspan="6" class="empty">No templates.</td></tr>';
      applyBars(tbody);
      $('#templates-note').textContent = `${templates.length} templates`;
      markRendered(ctx);
    }).catch(reportError);
  }

  /** A validation report: {ok, valid:[ids], invalid:[{template_id, problems}], warnings}
   *  (also accepts {templates:[{template_id, ok, problems, warnings}]}). */
  function validationHtml(report) {
    const ok = Boolean(report && report.ok);
    let html = `<p class="verdict ${ok ? 'verdict-ok' : 'verdict-bad'}">${ok ? 'Valid: every template is usable.' : 'Not valid: see the problems below.'}</p>`;
    const valid = report.valid || [];
    const invalid = (report.invalid || []).slice();
    const warnings = (report.warnings || []).slice();
    (report.templates || []).forEach((t) => {
      if ((t.problems || []).length || t.ok === false) invalid.push(t); else if (t.template_id) valid.push(t.template_id);
      (t.warnings || []).forEach((w) => warnings.push(`${t.template_id}: ${w}`));
    });
    if (valid.length) html += `<h3>Usable</h3>${listHtml(valid, 'valid-list')}`;
    if (invalid.length) {
      html += '<h3>Problems</h3><ul class="invalid-list">' + invalid.map((t) =>
        `<li><strong>${esc(t.template_id || '(unnamed template)')}</strong>${listHtml(t.problems || [])}</li>`).join('') + '</ul>';
    }
    if (warnings.length) html += `<h3>Warnings</h3>${listHtml(warnings, 'warning-list')}`;
    return html;
  }

  // ================================================================ Config

  const RISK_KEYS = ['audit_high_risk_pod_fields', 'reject_high_risk_pod_fields'];

  function isRiskyRow(row) {
    const last = String(row.key).split('.').pop();
    return RISK_KEYS.includes(last) && row.value === false;
  }

  function renderConfig(ctx, view) {
    view.innerHTML = `
      <div class="page-head"><h1>Configuration</h1></div>
      <section class="card card-security" aria-labelledby="security-title">
        <h2 id="security-title">Security</h2>
        <div class="two-col tight">
          <div><h3>Security opt-outs</h3><div id="security-opt-outs"><p class="muted">Loading…</p></div></div>
          <div><h3>High-risk pod fields</h3><div id="risk-settings"></div></div>
        </div>
        <h3>Provider warnings</h3><div id="provider-warnings"><p class="muted">Loading…</p></div>
      </section>
      <section class="card" aria-labelledby="health-title">
        <h2 id="health-title">Health <span id="health-overall"></span></h2>
        <div class="table-wrap"><table id="health-checks" class="data">
          <thead><tr><th scope="col">Check</th><th scope="col">Status</th><th scope="col">Detail</th></tr></thead>
          <tbody><tr><td colspan="3" class="muted">Loading…</td></tr></tbody></table></div>
      </section>
      <section class="card" aria-labelledby="sources-title">
        <h2 id="sources-title">Settings and where they come from</h2>
        <p class="muted" id="precedence"></p>
        <div class="field field-wide"><label for="config-search">Filter settings</label>
          <input id="config-search" type="search" autocomplete="off" placeholder="key, value or source"></div>
        <div class="table-wrap" tabindex="0" aria-label="Settings table">
          <table id="config-table" class="data">
            <thead><tr><th scope="col">Key</th><th scope="col">Value</th><th scope="col">Source</th><th scope="col">Origin</th></tr></thead>
            <tbody><tr><td colspan="4" class="muted">Loading…</td></tr></tbody>
          </table>
        </div>
      </section>`;

    $('#config-search').addEventListener('input', (e) => {
      const term = e.target.value.trim().toLowerCase();
      $$('#config-table tbody tr[data-key]').forEach((tr) => { tr.hidden = term !== '' && !tr.textContent.toLowerCase().includes(term); });
    });

    const sources = api('/api/v1/config/sources', { signal: ctx.signal }).then(paintSources);
    const config = api('/api/v1/config', { signal: ctx.signal }).then(paintSecurity);
    const health = loadHealth(ctx);
    Promise.allSettled([sources, config, health]).then((results) => {
      results.forEach((r) => { if (r.status === 'rejected') reportError(r.reason); });
      if (results.some((r) => r.status === 'fulfilled')) markRendered(ctx);
      repeat(ctx, () => loadHealth(ctx), 10000);
    });
  }

  function paintSources(answer) {
    const rows = answer.sources || [];
    $('#precedence').textContent = (answer.precedence || []).length
      ? `Precedence, lowest first: ${answer.precedence.join(' → ')}` : '';
    $('#config-table tbody').innerHTML = rows.map((row) => {
      const risky = isRiskyRow(row);
      return `<tr data-key="${esc(row.key)}" class="${risky ? 'row-risk' : ''}">` +
        `<th scope="row"><code>${esc(row.key)}</code>${risky ? ' <span class="badge tone-bad">security off</span>' : ''}</th>` +
        `<td class="value">${valueHtml(row.value)}</td>` +
        `<td class="source"><span class="source-tag source-${esc(row.source)}">${esc(row.source)}</span></td>` +
        `<td class="origin muted">${esc(row.origin || '')}</td></tr>`;
    }).join('') || '<tr><td colspan="4" class="empty">No settings reported.</td></tr>';
  }

  function paintSecurity(config) {
    const provider = (config && config.provider) || {};
    const optOuts = provider.security_opt_outs || [];
    $('#security-opt-outs').innerHTML = optOuts.length
      ? `<ul class="risk-list">${optOuts.map((o) => `<li>${esc(o)}</li>`).join('')}</ul>`
      : '<p class="all-clear">None: no security protection is switched off.</p>';
    const warnings = provider.warnings || [];
    $('#provider-warnings').innerHTML = warnings.length
      ? `<ul class="warn-list">${warnings.map((w) => `<li>${esc(w)}</li>`).join('')}</ul>`
      : '<p class="all-clear">None.</p>';
    const settings = provider.settings || {};
    const risky = optOuts.length > 0 || RISK_KEYS.some((key) => settings[key] === false);
    $('.card-security').classList.toggle('has-risk', risky);
    $('#risk-settings').innerHTML = '<ul class="plain">' + RISK_KEYS.map((key) => {
      const v = settings[key];
      const cls = v === false ? 'risk-off' : v === true ? 'risk-on' : 'muted';
      const text = v === false ? 'off — high-risk pod fields are not guarded' : v === true ? 'on' : 'not reported';
      return `<li class="${cls}" data-setting="${esc(key)}"><code>${esc(key)}</code>: ${esc(text)}</li>`;
    }).join('') + '</ul>';
  }

  /** /readyz answers 503 with the same JSON when not ready, so read the body either way. */
  async function loadHealth(ctx) {
    const res = await send('/readyz', { signal: ctx.signal });
    const body = parseJson(await res.text());
    if (!ctx.alive()) return;
    if (!body || typeof body !== 'object') throw new ApiError(res.status, { title: 'Readiness unknown', detail: `/readyz answered HTTP ${res.status}` });
    const checks = Object.entries(body.checks || {});
    $('#health-overall').innerHTML = `${badge(body.status)} <span class="muted small">${esc(body.service || '')} ${esc(body.version || '')}` +
      `${res.ok ? '' : ` · HTTP ${res.status}`}</span>`;
    $('#health-checks tbody').innerHTML = checks.map(([name, c]) =>
      `<tr data-check="${esc(name)}" class="row-${tone((c && c.status) || 'unknown')}"><th scope="row">${esc(name)}</th>` +
      `<td class="status">${badge(c && c.status)}</td><td class="detail">${esc((c && c.detail) || '')}</td></tr>`).join('')
      || '<tr><td colspan="3" class="empty">No checks reported.</td></tr>';
  }

  // ---------------------------------------------------------------- start

  function wireShell() {
    $('#login-form').addEventListener('submit', onLoginSubmit);
    $('#logout').addEventListener('click', signOut);
    $('#error-dismiss').addEventListener('click', clearBanner);
    // The skip link must not change the hash: the hash is the route.
    $('.skip-link').addEventListener('click', (e) => { e.preventDefault(); $('#view').focus(); });
    $('#drawer-close').addEventListener('click', () => closeDrawer());
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && !$('#machine-drawer').hidden) { e.preventDefault(); closeDrawer(); }
    });
    window.addEventListener('hashchange', () => route(true));
    // Another tab signing out does not affect this one: sessionStorage is per tab.
  }

  wireShell();
  startConsole();
})();
