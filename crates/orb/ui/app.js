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

// app.js is the entry (shell, hash routing, sign-in, identity); core.js holds the shared
// helpers and the API client; overview.js, machines.js, requests.js, templates.js and
// config.js render one page each.

import {
  $, $$, api, clearBanner, getIdentity, setIdentity, getToken, setToken, saveToken, forgetToken,
  newPage, setSessionExpiredHandler, topRole,
} from './core.js';
import { renderOverview } from './overview.js';
import { renderMachines, closeDrawer } from './machines.js';
import { renderRequests } from './requests.js';
import { renderTemplates } from './templates.js';
import { renderConfig } from './config.js';

// ---------------------------------------------------------------- routing

const PAGES = {
  overview: 'Overview',
  machines: 'Machines',
  requests: 'Requests',
  templates: 'Templates',
  config: 'Configuration',
};

/** The hash route: `#/machines?state=failed` → {name: 'machines', params}. */
function parseHash() {
  const match = /^#\/([a-z]+)(?:\?(.*))?$/.exec(location.hash || '');
  const name = match && PAGES[match[1]] ? match[1] : 'overview';
  return { name, params: new URLSearchParams(match && match[2] ? match[2] : '') };
}

let page = null; // the page on screen: {name, signal, alive(), stop()}

function stopPage() {
  if (page) page.stop();
  page = null;
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
  if (!getIdentity()) return;
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
  setIdentity(null);
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
  const me = getIdentity();
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
    setIdentity(await api('/api/v1/me', { signingIn: true }));
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
      showLogin(getToken() ? 'The saved token was refused; sign in again.' : '');
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
  setToken(token);
  try {
    if (await loadIdentity()) {
      saveToken(token);
      input.value = '';
      error.hidden = true;
      showApp();
      route(true);
    } else {
      setToken('');
      error.textContent = 'The server refused this token (401). Check that it is valid and not expired.';
      error.hidden = false;
      input.select();
    }
  } catch (err) {
    setToken('');
    error.textContent = err.message;
    error.hidden = false;
  } finally {
    button.disabled = false;
  }
}

function signOut() {
  forgetToken();
  clearBanner();
  showLogin('Signed out.');
}

/** A call answered 401 while signed in: the token expired or was revoked. */
function sessionExpired(problem) {
  if (!getIdentity()) return;
  forgetToken();
  const why = problem && (problem.detail || problem.title);
  showLogin(`Your session ended${why ? ` (${why})` : ''}; sign in again.`);
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
  // Leaving the page ends its event streams at once: a browser keeps at most six connections
  // to one server, and streams a reload left to linger would starve the next page's calls.
  window.addEventListener('pagehide', stopPage);
  // Another tab signing out does not affect this one: sessionStorage is per tab.
}

setSessionExpiredHandler(sessionExpired);
wireShell();
startConsole();
