// Plugins: the plugin folder, each loaded version (and when it was swapped in), load errors,
// task types whose plugin is gone, and the types deployed through the database: the stable
// and the candidate build with the candidate's share, how each did (failures, p50, fuel,
// memory), promote and rollback, and the deployment history.

import * as api from '../api.js';
import { h, add, bytes, fill, errorBox, fuel, relative, shortVersion, table, time } from '../dom.js';

/** A build's figures in one line: attempts, failure share, p50, fuel, memory. */
function figures(f) {
  if (!f || !f.attempts) return h('span', { class: 'muted' }, 'no attempts yet');
  const failed = ((100 * f.failures) / f.attempts).toFixed(1);
  return h('span', {},
    `${f.attempts} attempts, ${failed} % failed, p50 ${f.p50_ms ?? '—'} ms, p95 ${f.p95_ms ?? '—'} ms, `
    + `fuel ${fuel(f.mean_fuel)}, peak memory ${bytes(f.peak_memory)}`);
}

export default {
  title: 'Plugins',
  mount(root) {
    const head = h('p', { class: 'muted' });
    const loaded = h('section', { class: 'panel', id: 'plugins-loaded' });
    const deployed = h('section', { class: 'panel', id: 'plugins-deployed' });
    const message = h('div', { id: 'deploy-message' });
    const unloaded = h('section', { class: 'panel', id: 'plugins-unloaded' });
    add(root, h('h1', {}, 'Plugins'), head, loaded, message, deployed, unloaded);

    async function act(task_type, action) {
      try {
        const d = await api.post(`/plugins/${encodeURIComponent(task_type)}/${action}`);
        const now = d.candidate
          ? `version ${d.stable} stable, version ${d.candidate} on ${d.canary_percent} %`
          : `version ${d.stable} on every host`;
        fill(message, h('div', { class: 'notice ok' }, `${task_type}: ${action === 'promote' ? 'promoted' : 'rolled back'}; ${now}.`));
      } catch (error) {
        fill(message, errorBox(error));
      }
      await refresh();
    }

    /** One deployed type: what serves, how each build did, the buttons, the history. */
    async function deployment(task_type) {
      const v = await api.get(`/plugins/${encodeURIComponent(task_type)}/versions`);
      const d = v.deployment;
      const of = (n) => v.versions.find((x) => x.number === n);
      const stable = of(d.stable);
      const candidate = d.candidate ? of(d.candidate) : null;
      const button = (action, label) => api.has('post', `/plugins/{name}/${action}`)
        ? h('button', { type: 'button', class: 'small', dataset: { action, type: task_type }, onclick: () => act(task_type, action) }, label)
        : null;
      return h('div', { class: 'deployment', dataset: { type: task_type } },
        h('h3', {}, task_type),
        h('p', {},
          h('strong', {}, `Stable: version ${d.stable ?? '—'}`),
          stable ? [' ', h('code', { title: stable.digest }, shortVersion(stable.digest)), ' · ', figures(stable.figures)] : null),
        candidate
          ? h('p', { class: 'candidate' },
            h('strong', {}, `Candidate: version ${d.candidate} on ${d.canary_percent} % of attempts`),
            ' ', h('code', { title: candidate.digest }, shortVersion(candidate.digest)),
            ` · on trial since ${relative(d.canary_since)} · `, figures(candidate.figures))
          : h('p', { class: 'muted' }, 'No candidate on trial.'),
        h('p', {}, candidate ? button('promote', 'Promote') : null, ' ',
          button('rollback', candidate ? 'Roll back the candidate' : 'Roll back one version')),
        table(
          ['When', 'What', 'Version', 'By', 'From', 'Why'],
          v.history,
          (e) => [h('span', { title: time(e.at) }, relative(e.at)), e.action, e.version ?? '—', e.right, e.origin ?? '—', e.detail ?? ''],
          'No history.',
        ),
      );
    }

    async function refresh() {
      const p = await api.get('/plugins');
      head.textContent = `Plugin folder ${p.folder} · grants root ${p.grants_root}`;
      fill(loaded, h('h2', {}, 'Loaded'), table(
        ['Type', 'Version', 'From', 'Kind', 'Last swap', 'Pending', 'Load error (newer file)'],
        p.plugins,
        (x) => [
          h('span', {}, h('strong', {}, x.task_type), x.paused ? [' ', h('span', { class: 'status status-paused' }, 'paused')] : null),
          h('span', {}, h('code', { title: x.version }, shortVersion(x.version)),
            x.loading_since ? h('div', { class: 'small muted' }, `loading a new file (started ${relative(x.loading_since)})`) : null),
          x.source === 'deployment'
            ? h('span', {}, `deployed, version ${x.deployed_version}`,
              x.candidate ? h('div', { class: 'small' }, `candidate version ${x.candidate.version} on ${x.candidate.percent} %`) : null,
              x.shadowed_file ? h('div', { class: 'small muted' }, `shadows ${x.shadowed_file}`) : null)
            : 'plugin folder',
          x.kind,
          h('span', { title: time(x.loaded_at) }, relative(x.loaded_at)),
          x.pending,
          x.last_error ? h('pre', { class: 'error-text' }, x.last_error) : '—',
        ],
        'No plugins loaded: drop NAME.wasm into the plugin folder, or deploy one (spool deploy).',
      ));
      const types = p.plugins.filter((x) => x.source === 'deployment').map((x) => x.task_type);
      if (types.length && api.has('get', '/plugins/{name}/versions')) {
        fill(deployed, h('h2', {}, 'Deployed to every host'), ...(await Promise.all(types.map(deployment))));
      } else {
        fill(deployed, h('h2', {}, 'Deployed to every host'),
          h('p', { class: 'muted' }, 'Nothing deployed through the database: spool deploy FILE.wasm serves a build on every host.'));
      }
      fill(unloaded, h('h2', {}, 'Not loaded'), table(
        ['Type', 'Why', 'Removed', 'Pending'],
        p.unloaded,
        (x) => [
          h('strong', {}, x.task_type),
          x.loading_since
            ? h('span', { class: 'muted' }, `loading (started ${relative(x.loading_since)}; a first compile can take a minute)`)
            : x.error ? h('pre', { class: 'error-text' }, x.error) : '—',
          time(x.removed_at), x.pending,
        ],
        'Every plugin file loaded.',
      ));
    }

    return { refresh };
  },
};
