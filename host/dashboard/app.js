// The dashboard's shell: picks the page from the address (#/overview, #/task/42, ...), asks for
// a token when the host requires one, and refreshes the page every few seconds without a reload.

import * as api from './api.js';
import { errorBox } from './dom.js';
import overview from './pages/overview.js';
import types from './pages/types.js';
import deadLetters from './pages/dead_letters.js';
import task from './pages/task.js';
import plugins from './pages/plugins.js';
import alerts from './pages/alerts.js';

const PAGES = { overview, types, 'dead-letters': deadLetters, task, plugins, alerts };
/** How often the page reads the host. */
const REFRESH_MS = 3000;

const main = document.getElementById('main');
const live = document.getElementById('live');
const dialog = document.getElementById('token-dialog');
let current = null;
let busy = false;
let again = false;

/** The page and its parameter from the address: `#/task/42` is ['task', '42']. */
function route() {
  const [name, param] = location.hash.replace(/^#\/?/, '').split('/');
  return PAGES[name] ? [name, param] : ['overview', undefined];
}

async function show() {
  current?.view.unmount?.();
  const [name, param] = route();
  for (const link of document.querySelectorAll('#nav a')) {
    link.classList.toggle('active', link.dataset.page === name);
  }
  const page = PAGES[name];
  document.title = `${page.title} · Spool`;
  main.replaceChildren();
  main.dataset.page = name;
  delete main.dataset.loaded;
  current = { name, view: page.mount(main, param) };
  await refresh();
}

/** Refreshes the current page, one refresh at a time (a refresh asked for meanwhile follows). */
async function refresh() {
  if (!current) return;
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  const shown = current;
  try {
    await shown.view.refresh();
    if (shown === current) {
      live.textContent = `live · ${new Date().toLocaleTimeString()}`;
      live.classList.remove('stale');
      main.dataset.loaded = 'true';
      main.querySelector(':scope > .page-error')?.remove();
    }
  } catch (error) {
    live.textContent = `not updating: ${error.message}`;
    live.classList.add('stale');
    if (shown === current) {
      const box = errorBox(error);
      box.classList.add('page-error');
      main.querySelector(':scope > .page-error')?.remove();
      main.prepend(box);
    }
  } finally {
    busy = false;
    if (again) {
      again = false;
      refresh();
    }
  }
}

function askForToken(reason) {
  if (reason) document.getElementById('token-why').textContent = reason;
  if (!dialog.open) dialog.showModal();
  document.getElementById('token-input').focus();
}

document.getElementById('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = document.getElementById('token-input');
  api.setToken(input.value.trim());
  input.value = '';
  dialog.close();
  document.getElementById('forget-token').hidden = false;
  show();
});

document.getElementById('forget-token').addEventListener('click', () => {
  api.setToken(null);
  document.getElementById('forget-token').hidden = true;
  askForToken();
});

document.getElementById('goto').addEventListener('submit', (event) => {
  event.preventDefault();
  const id = document.getElementById('goto-id').value;
  if (id) location.hash = `#/task/${id}`;
});

api.onUnauthorized((error) => {
  // A read token that may not change things: say so, but keep it for reading.
  if (error.message.includes('read token does not allow')) return;
  askForToken(`The host refused the token: ${error.message}`);
});

window.addEventListener('hashchange', show);
document.addEventListener('visibilitychange', () => {
  if (!document.hidden) refresh();
});

async function start() {
  try {
    await api.loadSpec();
  } catch (error) {
    main.replaceChildren(errorBox(error));
    return;
  }
  setInterval(() => {
    if (!document.hidden && !dialog.open) refresh();
  }, REFRESH_MS);
  document.getElementById('forget-token').hidden = !api.token();
  if (api.tokenRequired() && !api.token()) {
    askForToken();
    return;
  }
  show();
}

start();
