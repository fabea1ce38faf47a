// Dead letters: failed tasks with their last error, filtered by type, error text and time;
// select some and retry or discard them together.

import * as api from '../api.js';
import { h, add, fill, clip, errorBox, table, taskLink, time } from '../dom.js';

/** The most dead letters one page lists. */
const LIMIT = 200;

export default {
  title: 'Dead letters',
  mount(root) {
    const selected = new Set();
    let shown = [];
    const serverFilters = ['error_contains', 'since', 'until'].every((p) => api.hasParam('/tasks', p));
    const bulkRetry = api.has('post', '/tasks/retry');
    const bulkDiscard = api.has('post', '/tasks/discard');

    const typeSelect = h('select', { id: 'filter-type', onchange: () => refresh() }, h('option', { value: '' }, 'every type'));
    const errorInput = h('input', { id: 'filter-error', type: 'search', placeholder: 'error contains…', onchange: () => refresh() });
    const sinceInput = h('input', { id: 'filter-since', type: 'datetime-local', onchange: () => refresh() });
    const untilInput = h('input', { id: 'filter-until', type: 'datetime-local', onchange: () => refresh() });
    const message = h('div', { id: 'dead-message' });
    const summary = h('span', { class: 'muted', id: 'dead-summary' });
    const retryButton = h('button', { type: 'button', id: 'retry-selected', disabled: true, onclick: () => act('retry') }, 'Retry selected');
    const discardButton = h('button', {
      type: 'button', id: 'discard-selected', class: 'danger', disabled: true,
      title: bulkDiscard ? 'Leave the selected tasks failed for good (cancelled), with a note' : 'Not available on this host: it needs POST /tasks/discard',
      onclick: () => act('discard'),
    }, 'Discard selected');
    const list = h('section', { class: 'panel', id: 'dead-list' });

    add(root, 
      h('h1', {}, 'Dead letters'),
      h('p', { class: 'muted' }, 'Tasks whose retries ran out or whose handler failed them for good. Retry puts them back in the queue with fresh attempts.'),
      h('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); refresh(); } },
        h('label', {}, 'Type ', typeSelect),
        h('label', {}, 'Error ', errorInput),
        h('label', {}, 'Since ', sinceInput),
        h('label', {}, 'Until ', untilInput),
        h('button', { type: 'submit', class: 'small' }, 'Filter')),
      h('div', { class: 'toolbar' }, retryButton, discardButton, summary),
      message,
      list,
    );

    function updateButtons() {
      retryButton.disabled = selected.size === 0;
      discardButton.disabled = selected.size === 0 || !bulkDiscard;
      summary.textContent = `${selected.size} selected · ${shown.length} shown`;
    }

    const iso = (input) => (input.value ? new Date(input.value).toISOString() : '');

    async function act(action) {
      const ids = [...selected];
      if (!ids.length) return;
      retryButton.disabled = discardButton.disabled = true;
      try {
        let changed;
        if (action === 'retry' && !bulkRetry) {
          // One at a time where the host has no bulk retry.
          for (const id of ids) await api.post(`/tasks/${id}/retry`);
          changed = ids.length;
        } else {
          const answer = await api.post(`/tasks/${action}`, { ids, status: 'failed' });
          changed = answer?.changed ?? answer?.count ?? answer?.ids?.length ?? ids.length;
        }
        selected.clear();
        fill(message, h('div', { class: 'notice ok' },
          action === 'retry' ? `Re-queued ${changed} task(s).` : `Discarded ${changed} task(s).`));
      } catch (error) {
        fill(message, errorBox(error));
      }
      await refresh();
    }

    async function refresh() {
      const filters = {
        status: 'failed',
        limit: LIMIT,
        type: typeSelect.value,
        ...(serverFilters ? { error_contains: errorInput.value, since: iso(sinceInput), until: iso(untilInput) } : {}),
      };
      const [page, plugins] = await Promise.all([api.get(`/tasks${api.query(filters)}`), api.get('/plugins')]);
      let tasks = page.tasks;
      if (!serverFilters) {
        // This host's listing filters by status and type only: the rest is done here.
        const text = errorInput.value;
        const since = sinceInput.value ? new Date(sinceInput.value) : null;
        const until = untilInput.value ? new Date(untilInput.value) : null;
        tasks = tasks.filter((t) => {
          const at = new Date(t.finished_at ?? t.created_at);
          return (!text || (t.last_error ?? '').includes(text)) && (!since || at >= since) && (!until || at < until);
        });
      }
      shown = tasks;
      const ids = new Set(tasks.map((t) => t.id));
      for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);

      const types = [...new Set([...plugins.plugins, ...plugins.unloaded].map((p) => p.task_type))].sort();
      if (typeSelect.options.length !== types.length + 1) {
        const current = typeSelect.value;
        fill(typeSelect, h('option', { value: '' }, 'every type'), types.map((t) => h('option', { value: t }, t)));
        typeSelect.value = current;
      }

      const all = h('input', {
        type: 'checkbox', id: 'select-all', 'aria-label': 'Select every task shown',
        checked: tasks.length > 0 && tasks.every((t) => selected.has(t.id)),
        onchange: (e) => {
          for (const t of tasks) e.target.checked ? selected.add(t.id) : selected.delete(t.id);
          list.querySelectorAll('input[data-id]').forEach((box) => { box.checked = e.target.checked; });
          updateButtons();
        },
      });
      fill(list, table(
        [all, 'Task', 'Type', 'Attempts', 'Failed at', 'Last error'],
        tasks,
        (t) => [
          h('input', {
            type: 'checkbox', dataset: { id: String(t.id) }, 'aria-label': `Select task ${t.id}`,
            checked: selected.has(t.id),
            onchange: (e) => {
              e.target.checked ? selected.add(t.id) : selected.delete(t.id);
              all.checked = tasks.every((x) => selected.has(x.id));
              updateButtons();
            },
          }),
          taskLink(t.id), t.task_type, t.attempts, time(t.finished_at),
          h('td', { class: 'error-text' }, clip(t.last_error, 160)),
        ],
        'No dead letters match.',
      ));
      if (page.next_before) list.append(h('p', { class: 'muted small' }, `Showing the newest ${LIMIT}; narrow the filter to see older ones.`));
      updateButtons();
    }

    return { refresh };
  },
};
