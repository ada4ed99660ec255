// Templates page: the templates table with usage and problems, the render preview of the
// selected template and the validator of a pasted templates document.

import {
  $, $$, esc, api, isAbort, listHtml, emptyHtml, reportError, markRendered,
  usageHtml, applyBars, templateUsage,
} from './core.js';

export function renderTemplates(ctx, view) {
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
