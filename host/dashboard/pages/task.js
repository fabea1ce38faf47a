// One task: its state, payload, every attempt (with what it cost: time, fuel, peak memory),
// log, progress, result or last error, and when it is expected to be done; retry and cancel;
// the recorded attempts with their host calls and the command that replays each.

import * as api from '../api.js';
import { h, add, bytes, fill, duration, errorBox, fuel, json, relative, shortVersion, status, table, time } from '../dom.js';

/** The most host calls of one record the page lists. */
const MAX_CALLS_SHOWN = 200;

/** One recorded host call as a line: what the guest asked and what it got. */
function callText(call) {
  switch (call.call) {
    case 'wall_clock': return `wall clock → ${new Date(call.secs * 1000 + Math.floor(call.nanos / 1e6)).toISOString()}`;
    case 'monotonic_clock': return `monotonic clock → ${(call.ns / 1e6).toFixed(3)} ms`;
    case 'random': return `${call.source} random → ${call.hex.length / 2} bytes`;
    case 'service': return `${call.name}(${JSON.stringify(call.subject)}) → ${JSON.stringify(call.answer)}`;
    case 'http': return `HTTP ${call.method} ${call.url} → ${httpAnswer(call.answer)}`;
    default: return JSON.stringify(call);
  }
}

/** A recorded HTTP answer: the status and body size, or the error. */
function httpAnswer(answer) {
  if (answer.kind === 'response') {
    const size = answer.body.text !== undefined ? new TextEncoder().encode(answer.body.text).length : answer.body.hex.length / 2;
    return `${answer.status}, ${size} body bytes`;
  }
  if (answer.kind === 'failed') return `error ${JSON.stringify(answer.error)}`;
  return 'no answer before the attempt ended';
}

export default {
  title: 'Task',
  mount(root, id) {
    const message = h('div', { id: 'task-message' });
    const body = h('div', { id: 'task' });
    add(root, h('h1', {}, `Task #${id ?? '?'}`), message, body);

    async function act(action) {
      try {
        await api.post(`/tasks/${id}/${action}`);
        fill(message, h('div', { class: 'notice ok' }, action === 'retry' ? 'Re-queued.' : 'Cancelled.'));
      } catch (error) {
        fill(message, errorBox(error));
      }
      await refresh();
    }

    async function refresh() {
      if (!/^\d+$/.test(id ?? '')) {
        fill(body, errorBox('No task id in the address: open #/task/ID.'));
        return;
      }
      let t;
      try {
        t = await api.get(`/tasks/${id}`);
      } catch (error) {
        if (error.status !== 404) throw error;
        fill(body, errorBox(error));
        return;
      }
      const final = ['done', 'failed', 'cancelled'].includes(t.status);
      const facts = [
        ['Status', status(t.status)],
        ['Type', t.task_type],
        ['Priority', t.priority],
        ['Attempts', `${t.attempts} (retries used ${t.retry_count} of ${t.max_retry})`],
        ['Created', time(t.created_at)],
        ['Next run', t.status === 'pending' ? `${time(t.next_run_at)} (${relative(t.next_run_at)})` : '—'],
        ['Last attempt started', time(t.attempted_at)],
        ['Finished', time(t.finished_at)],
        ['Estimated done', final ? '—' : t.estimated_done_at ? `${time(t.estimated_done_at)} (${relative(t.estimated_done_at)})` : 'no estimate yet'],
        ['Running on', t.lease_owner ? `${t.lease_owner} (lease until ${time(t.lease_expires_at)})` : '—'],
        ['Plugin version', h('code', { title: t.plugin_version ?? '' }, shortVersion(t.plugin_version))],
        ['Idempotency key', t.idempotency_key ?? '—'],
      ];
      if (t.archived) facts.push(['Archived', `${time(t.archived_at)}: only kept for the record; it cannot be retried`]);
      fill(body, 
        h('div', { class: 'toolbar' },
          ['failed', 'cancelled'].includes(t.status) && !t.archived ? h('button', { type: 'button', id: 'task-retry', onclick: () => act('retry') }, 'Retry') : null,
          ['pending', 'running'].includes(t.status) ? h('button', { type: 'button', id: 'task-cancel', class: 'danger', onclick: () => act('cancel') }, 'Cancel') : null),
        h('section', { class: 'panel' },
          h('dl', { class: 'facts' }, facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
          t.progress != null
            ? h('div', { class: 'progress' }, h('progress', { max: 100, value: t.progress }), ` ${t.progress}%`, t.progress_note ? ` · ${t.progress_note}` : '')
            : null),
        t.last_error ? h('section', { class: 'panel' }, h('h2', {}, 'Last error'), h('pre', { class: 'error-text', id: 'task-error' }, t.last_error)) : null,
        h('div', { class: 'grid2' },
          h('section', { class: 'panel' }, h('h2', {}, 'Payload'), h('pre', { id: 'task-payload' }, json(t.payload))),
          h('section', { class: 'panel' }, h('h2', {}, 'Result'), h('pre', { id: 'task-result' }, json(t.result)))),
        h('section', { class: 'panel' }, h('h2', {}, 'Log'),
          t.log ? h('pre', { class: 'log', id: 'task-log' }, t.log) : h('p', { class: 'muted', id: 'task-log-empty' }, 'No log lines.')),
        h('section', { class: 'panel', id: 'task-attempts' }, h('h2', {}, 'Attempts'),
          Array.isArray(t.history)
            ? table(['#', 'Host', 'Plugin', 'Started', 'Ended', 'Took', 'Fuel', 'Memory', 'Outcome', 'Error', 'Log'], t.history, (a) => [
              a.attempt, a.host ?? '—', h('code', { title: a.plugin_version ?? '' }, shortVersion(a.plugin_version)),
              time(a.started_at), time(a.finished_at),
              // The handler's own time where measured, else from the claim to the record.
              a.cost ? duration(a.cost.wall_ms)
                : a.started_at ? duration(Date.parse(a.finished_at) - Date.parse(a.started_at)) : '—',
              h('span', { class: 'attempt-fuel' }, fuel(a.cost?.fuel_used)),
              h('span', { class: 'attempt-memory' }, bytes(a.cost?.peak_memory)),
              status(a.outcome),
              a.error ? h('span', { class: 'error-text' }, a.error) : '—',
              a.log ? h('details', {}, h('summary', {}, 'log'), h('pre', { class: 'log' }, a.log)) : '—',
            ], 'No attempt has finished yet.')
            : h('p', { class: 'muted' }, 'This host keeps only the latest attempt (above): its GET /tasks/{id} has no attempt history.'),
          Array.isArray(t.history) && t.attempts > t.history.length + (t.status === 'running' ? 1 : 0)
            ? h('p', { class: 'muted small' }, `${t.attempts} attempts in all; the first and the latest are kept.`)
            : null),
        await recordsPanel(),
      );
    }

    /** The recorded attempts: each one's host calls in order, and the command that replays it. */
    async function recordsPanel() {
      if (!api.has('get', '/tasks/{id}/records')) return null;
      const listed = await api.get(`/tasks/${id}/records`);
      const panel = h('section', { class: 'panel', id: 'task-records' }, h('h2', {}, 'Recorded attempts'));
      if (!listed.records.length) {
        add(panel, h('p', { class: 'muted' }, 'No attempt of this task was recorded (the type\'s manifest sets `record`; by default attempts that did not succeed keep one).'));
        return panel;
      }
      for (const r of listed.records) {
        const record = await api.get(`/tasks/${id}/records/${r.attempt}`);
        const shown = record.calls.slice(0, MAX_CALLS_SHOWN);
        add(panel,
          h('h3', {}, `Attempt ${r.attempt}: ${record.outcome}, ${record.calls.length} host calls, ${bytes(r.bytes)}${r.truncated ? ', truncated at record_max' : ''}`),
          h('p', {}, 'Replay it on your machine: ', h('code', { class: 'replay-command' }, `spool replay ${id} --attempt ${r.attempt}`)),
          h('ol', { class: 'call-timeline' }, shown.map((call) => h('li', {}, callText(call)))),
          record.calls.length > shown.length ? h('p', { class: 'muted small' }, `… and ${record.calls.length - shown.length} more (spool replay --verbose lists them all).`) : null);
      }
      return panel;
    }

    return { refresh };
  },
};
