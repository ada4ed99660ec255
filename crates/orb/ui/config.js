// Config page: security opt-outs and high-risk settings, the health checks of /readyz
// (polled) and the table of settings with where each value comes from.

import {
  $, $$, esc, api, send, badge, tone, valueHtml, parseJson, reportError, ApiError, markRendered, repeat,
} from './core.js';

const RISK_KEYS = ['audit_high_risk_pod_fields', 'reject_high_risk_pod_fields'];

function isRiskyRow(row) {
  const last = String(row.key).split('.').pop();
  return RISK_KEYS.includes(last) && row.value === false;
}

export function renderConfig(ctx, view) {
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
