// Plugins: the plugin folder, each loaded version (and when it was swapped in), load errors,
// and task types whose plugin is gone.

import * as api from '../api.js';
import { h, add, fill, relative, shortVersion, table, time } from '../dom.js';

export default {
  title: 'Plugins',
  mount(root) {
    const head = h('p', { class: 'muted' });
    const loaded = h('section', { class: 'panel', id: 'plugins-loaded' });
    const unloaded = h('section', { class: 'panel', id: 'plugins-unloaded' });
    add(root, h('h1', {}, 'Plugins'), head, loaded, unloaded);

    async function refresh() {
      const p = await api.get('/plugins');
      head.textContent = `Plugin folder ${p.folder} · grants root ${p.grants_root}`;
      fill(loaded, h('h2', {}, 'Loaded'), table(
        ['Type', 'Version', 'Kind', 'Last swap', 'Pending', 'Load error (newer file)'],
        p.plugins,
        (x) => [
          h('span', {}, h('strong', {}, x.task_type), x.paused ? [' ', h('span', { class: 'status status-paused' }, 'paused')] : null),
          h('span', {}, h('code', { title: x.version }, shortVersion(x.version)),
            x.loading_since ? h('div', { class: 'small muted' }, `loading a new file (started ${relative(x.loading_since)})`) : null),
          x.kind,
          h('span', { title: time(x.loaded_at) }, relative(x.loaded_at)),
          x.pending,
          x.last_error ? h('pre', { class: 'error-text' }, x.last_error) : '—',
        ],
        'No plugins loaded: drop NAME.wasm into the plugin folder.',
      ));
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
