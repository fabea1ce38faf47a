// Task types: counts per state, what the loaded build's attempts cost on this host (p50 time,
// mean fuel, peak memory), plugin version and load state, policy, and whether the type is
// paused (with pause and resume).

import * as api from '../api.js';
import { h, add, bytes, fill, duration, errorBox, fuel, relative, shortVersion, table, taskLink, time, unavailable } from '../dom.js';

/** What the loaded build's attempts cost on this host: p50 and p95 time, mean fuel, peak memory. */
function costCell(cost) {
  if (!cost || !cost.attempts) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'type-cost', title: `${cost.attempts} attempts on this host, ${cost.failures} failed` },
    `p50 ${duration(cost.p50_ms)}, p95 ${duration(cost.p95_ms)} · fuel ${fuel(cost.mean_fuel)} · ${bytes(cost.peak_memory)}`);
}

export default {
  title: 'Task types',
  mount(root) {
    const hasTypes = api.has('get', '/types');
    const message = h('div', { id: 'types-message' });
    const body = h('section', { class: 'panel', id: 'types' });
    const hasSchedules = api.has('get', '/schedules');
    const schedules = h('section', { class: 'panel', id: 'schedules' });
    add(root, 
      h('h1', {}, 'Task types'),
      hasTypes ? null : unavailable('Counts per state, mean attempt time and pausing', 'GET /types'),
      message,
      body,
      hasSchedules ? schedules : null,
    );

    async function act(name, action) {
      try {
        await api.post(`/types/${encodeURIComponent(name)}/${action}`);
        fill(message, h('div', { class: 'notice ok' }, `${name}: ${action === 'pause' ? 'paused' : 'resumed'}.`));
      } catch (error) {
        fill(message, errorBox(error));
      }
      await refresh();
    }

    async function refresh() {
      if (hasSchedules) {
        const s = await api.get('/schedules');
        fill(schedules, h('h2', {}, 'Schedules'), table(
          ['Type', 'Name', 'From', 'When', 'Next run', 'Last tick', 'Plugin here'],
          s.schedules,
          (x) => [
            h('strong', {}, x.task_type), x.name, x.source,
            h('code', {}, x.cron ? `${x.cron} (${x.timezone})` : `every ${x.every ?? `${x.every_ms} ms`}`),
            x.next_run_at ? `${time(x.next_run_at)} (${relative(x.next_run_at)})` : '—',
            x.last_tick ? h('span', {}, time(x.last_tick), x.last_task_id ? [' · ', taskLink(x.last_task_id)] : null) : '—',
            x.plugin_loaded ? 'yes' : h('span', { class: 'error-text' }, 'no: its tasks wait'),
          ],
          'No schedules: a manifest\'s [[schedule]] or spool.toml adds them.',
        ));
      }
      if (hasTypes) {
        const answer = await api.get('/types');
        const types = answer.types ?? answer;
        fill(body, table(
          ['Type', 'Pending', 'Running', 'Done', 'Failed', 'Cancelled', 'Mean attempt', 'Cost here', 'Plugin', 'Policy', 'State', ''],
          types,
          (t) => {
            const counts = t.counts ?? t;
            const paused = Boolean(t.paused);
            const canToggle = api.has('post', `/types/{name}/${paused ? 'resume' : 'pause'}`);
            return [
              h('strong', {}, t.task_type ?? t.name),
              counts.pending ?? 0, counts.running ?? 0, counts.done ?? 0, counts.failed ?? 0, counts.cancelled ?? 0,
              duration(t.mean_attempt_ms),
              costCell(t.cost),
              pluginCell(t.plugin ?? t),
              policyText(t.policy ?? t.plugin?.policy),
              paused ? h('span', { class: 'status status-paused', title: `since ${time(t.paused_at)}` }, 'paused') : h('span', { class: 'status status-active' }, 'active'),
              canToggle
                ? h('button', { type: 'button', class: 'small', dataset: { action: paused ? 'resume' : 'pause', type: t.task_type ?? t.name }, onclick: () => act(t.task_type ?? t.name, paused ? 'resume' : 'pause') }, paused ? 'Resume' : 'Pause')
                : '',
            ];
          },
          'No task types: add a plugin to the plugin folder.',
        ));
      } else {
        const plugins = await api.get('/plugins');
        fill(body, table(
          ['Type', 'Pending', 'Plugin', 'Loaded', 'Policy'],
          [...plugins.plugins, ...plugins.unloaded],
          (p) => [
            h('strong', {}, p.task_type), p.pending,
            pluginCell({ version: p.version, load_state: p.version ? 'loaded' : 'not loaded', load_error: p.last_error ?? p.error }),
            time(p.loaded_at), policyText(p.policy),
          ],
          'No task types: add a plugin to the plugin folder.',
        ));
      }
    }

    return { refresh };
  },
};

function pluginCell(p) {
  const state = p.load_state ?? (p.loaded === false ? 'not loaded' : p.version ? 'loaded' : 'not loaded');
  const error = p.load_error ?? p.last_error ?? p.error;
  return h('div', {},
    h('code', { title: p.version ?? '' }, shortVersion(p.version ?? p.plugin_version)),
    ' ', h('span', { class: state === 'loaded' ? 'muted' : 'status status-failed' }, state),
    error ? h('div', { class: 'error-text small', title: error }, error.length > 100 ? `${error.slice(0, 100)}…` : error) : null);
}

function policyText(policy) {
  if (!policy) return '—';
  const parts = [
    `${policy.max_retry} retries`,
    `timeout ${duration(policy.timeout_ms)}`,
    `priority ${policy.priority}`,
  ];
  if (policy.concurrency != null) parts.push(`≤${policy.concurrency} at once`);
  if (policy.rate != null) parts.push(`${policy.rate}/s`);
  return h('span', { class: 'small' }, parts.join(' · '));
}
