/*
 * orb console, shared core: escaping and formatting, the API client (bearer token in
 * sessionStorage, RFC 7807 problems, the error banner), the fetch-based event-stream
 * reader, page-context helpers and role checks. Imported by app.js and every page module.
 *
 * Security notes (see also app.js): every value put into HTML goes through esc(); the
 * bearer token lives in sessionStorage (this tab only), is sent as an Authorization header
 * and is never written into the page or the URL.
 */

// ---------------------------------------------------------------- constants

const TOKEN_KEY = 'orb.token';
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

// ---------------------------------------------------------------- small helpers

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

const HTML_ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
/** Escapes any value for use in HTML text or a double-quoted attribute. */
export function esc(value) {
  return value == null ? '' : String(value).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

export function isAbort(err) {
  return err && err.name === 'AbortError';
}

/** Resolves after ms, or early (without error) when the signal aborts. */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

export function parseJson(text) {
  try { return JSON.parse(text); } catch (_) { return null; }
}

// One formatter for all dates: creating Intl objects per row is slow with many rows.
export const DATE_FORMAT = new Intl.DateTimeFormat(undefined, {
  year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
});
// Tables show this year's dates without the year (the full time is in the title).
const SHORT_DATE_FORMAT = new Intl.DateTimeFormat(undefined, {
  month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
});
const THIS_YEAR = new Date().getFullYear();
export const COLLATOR = new Intl.Collator(undefined, { numeric: true, sensitivity: 'base' });

function fmtDate(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return (date.getFullYear() === THIS_YEAR ? SHORT_DATE_FORMAT : DATE_FORMAT).format(date);
}

/** A <time> element, or a dash for no time. */
export function timeHtml(iso) {
  if (!iso) return '<span class="muted">—</span>';
  return `<time datetime="${esc(iso)}" title="${esc(iso)}">${esc(fmtDate(iso))}</time>`;
}

export function fmtAgo(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function fmtDuration(seconds) {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds)) return '';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** A config or field value as text: strings as they are, everything else as JSON. */
export function valueHtml(value) {
  if (value === null || value === undefined) return '<span class="muted">null</span>';
  if (typeof value === 'string') return `<code>${esc(value)}</code>`;
  return `<code>${esc(JSON.stringify(value))}</code>`;
}

export function tone(status) {
  // Pod phases (Running, Pending, Failed, Succeeded) come capitalised.
  return TONE[status] || TONE[String(status).toLowerCase()] || 'muted';
}

/** A coloured pill for a machine state, request status or check status. */
export function badge(status) {
  const text = status == null || status === '' ? '—' : status;
  return `<span class="badge tone-${tone(status)}">${esc(text)}</span>`;
}

export function listHtml(items, className = '') {
  if (!items || !items.length) return '';
  return `<ul class="${esc(className)}">${items.map((i) => `<li>${esc(i)}</li>`).join('')}</ul>`;
}

export function emptyHtml(text) {
  return `<p class="empty">${esc(text)}</p>`;
}

export function shortId(id) {
  return id && id.length > 22 ? `${id.slice(0, 12)}…${id.slice(-6)}` : id || '';
}

export function announce(text) {
  const region = $('#announce');
  region.textContent = '';
  // A fresh text node after a tick makes screen readers read repeated messages too.
  setTimeout(() => { region.textContent = text; }, 30);
}

// ---------------------------------------------------------------- session

// Shared mutable state of the console, behind the small accessors below.
const session = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  me: null,
};

/** The bearer token calls are sent with ('' when there is none). */
export function getToken() {
  return session.token;
}

/** Sets the token for the next calls (in memory only; see saveToken). */
export function setToken(token) {
  session.token = token;
}

/** Keeps an accepted token in sessionStorage (this tab only). */
export function saveToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

/** Forgets the token, in memory and in sessionStorage. */
export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  session.token = '';
}

/** Who the server says the token belongs to (GET /api/v1/me); null while signed out. */
export function getIdentity() {
  return session.me;
}

export function setIdentity(me) {
  session.me = me;
}

// What a 401 on an ordinary call does (app.js sets it: back to the sign-in form).
let sessionExpiredHandler = () => {};

export function setSessionExpiredHandler(fn) {
  sessionExpiredHandler = fn;
}

export function canOperate() {
  return Boolean(session.me && Array.isArray(session.me.roles) && session.me.roles.includes('operator'));
}

export function topRole(roles) {
  for (const role of ['admin', 'operator', 'viewer']) if ((roles || []).includes(role)) return role;
  return 'no role';
}

// ---------------------------------------------------------------- API calls

/** A failed call, carrying the RFC 7807 problem document the server sent. */
export class ApiError extends Error {
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
export async function send(path, { method = 'GET', json, body, signal, accept = 'application/json', signingIn = false } = {}) {
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
    if (!signingIn) sessionExpiredHandler(problem);
    throw new ApiError(401, problem);
  }
  return res;
}

/** A JSON call; non-2xx answers become ApiError. */
export async function api(path, options = {}) {
  const res = await send(path, options);
  if (!res.ok) throw new ApiError(res.status, await problemOf(res));
  if (res.status === 204) return null;
  return res.json();
}

/** Shows a failed call in the error banner (ignoring aborts and 401s, which sign out). */
export function reportError(err) {
  if (!err || isAbort(err) || err.status === 401) return;
  console.warn('orb console:', err);
  showBanner(err.message || String(err));
}

function showBanner(text) {
  $('#error-text').textContent = text;
  $('#error-banner').hidden = false;
}

export function clearBanner() {
  $('#error-banner').hidden = true;
  $('#error-text').textContent = '';
}

/**
 * All machines, page by page. The server's cursor is the next offset, so once the
 * first page tells the total the others are fetched a few at a time in parallel.
 */
export async function fetchAllMachines(signal) {
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
export async function followEventStream(path, { signal, onEvent, onOpen, done = () => false }) {
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

export function newPage(name) {
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

/** Marks the page as showing its first data (a hook for browser tests). */
export function markRendered(ctx) {
  if (!ctx.alive() || document.body.dataset.rendered === ctx.name) return;
  document.body.dataset.rendered = ctx.name;
  window.orbRenderedAt = performance.now();
}

/**
 * Runs task again and again, at least minMs apart and longer when the task itself is
 * slow (a big cluster is not hammered), skipping while the tab is hidden.
 */
export function repeat(ctx, task, minMs, factor = 3) {
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

// ---------------------------------------------------------------- usage bars (overview, templates)

export function usageHtml(used, max) {
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
export function applyBars(root) {
  $$('[data-pct]', root).forEach((el) => { el.style.width = `${Number(el.dataset.pct) || 0}%`; });
}

export function templateUsage(t) {
  const max = Number(t.max_instances);
  const used = max - Number(t.available_number);
  return { used, max, level: max > 0 && used / max >= 0.8 ? (used >= max ? 'full' : 'warn') : 'ok' };
}
