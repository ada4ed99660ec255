// Requests page: the request form (operators), the requests table with live progress from
// a small pool of per-request event streams, cancel, and the timeline of one request.

import {
  $, $$, esc, api, badge, timeHtml, parseJson, reportError, canOperate, ApiError,
  followEventStream, markRendered, repeat,
} from './core.js';

// Browsers open ~6 HTTP/1.1 connections per origin and every event stream holds one;
// keep a few free for ordinary calls.
const REQUEST_STREAMS_MAX = 3;

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

export function renderRequests(ctx, view, params) {
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
