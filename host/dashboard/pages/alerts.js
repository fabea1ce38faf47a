// Alerts: what fires now, the rules and channels, recent alerts, and the last drill (with a
// button to run one).

import * as api from '../api.js';
import { h, add, fill, errorBox, relative, status, table, time, unavailable } from '../dom.js';

export default {
  title: 'Alerts',
  mount(root) {
    const available = api.has('get', '/alerts');
    const message = h('div', { id: 'alerts-message' });
    const body = h('div', { id: 'alerts' });
    add(root, h('h1', {}, 'Alerts'), message, body);
    if (!available) {
      body.append(unavailable('Alerting', 'GET /alerts'));
      return { refresh: async () => {} };
    }

    async function drill() {
      try {
        const report = await api.post('/alerts/drill');
        fill(message, h('div', { class: 'notice ok' }, `Drill sent at ${time(report.at)}: every channel took the test alert.`));
      } catch (error) {
        fill(message, errorBox(error));
      }
      await refresh();
    }

    const outcomes = (channels) => (channels ?? []).map((c) =>
      h('div', { class: 'small' }, status(c.ok ? 'ok' : 'failed'), ` ${c.channel} (${c.kind})`, c.error ? h('span', { class: 'error-text' }, ` ${c.error}`) : null));

    async function refresh() {
      const a = await api.get('/alerts');
      const drillReport = a.last_drill;
      fill(body, 
        a.warnings?.length
          ? h('div', { class: 'notice unavailable', id: 'alerts-warnings' }, h('strong', {}, 'The alert chain needs attention'),
            h('ul', {}, a.warnings.map((w) => h('li', {}, w))))
          : null,
        h('section', { class: 'panel', id: 'alerts-firing' }, h('h2', {}, 'Firing now'),
          table(['Alert', 'Type', 'Figure', 'What holds', 'Since', 'Last sent'], a.firing ?? [],
            (f) => [h('code', {}, f.alert), f.task_type ?? 'every type', f.count, f.text, `${time(f.since)} (${relative(f.since)})`, time(f.last_sent)],
            'Nothing is firing.')),
        h('div', { class: 'grid2' },
          h('section', { class: 'panel', id: 'alerts-rules' }, h('h2', {}, 'Rules'),
            table(['Rule', 'Type', 'When'], a.rules ?? [], (r) => [h('code', {}, r.kind), r.task_type ?? 'every type', r.description], 'No alert rules.'),
            h('p', { class: 'muted small' }, `A firing alert is sent again every ${a.cooldown_secs} s while it lasts. Alerts link to ${a.dashboard_url}.`)),
          h('section', { class: 'panel', id: 'alerts-channels' }, h('h2', {}, 'Channels'),
            table(['Name', 'Kind', 'Target'], a.channels ?? [], (c) => [c.name, c.kind, c.target],
              'No channel: alerts reach nobody. Add [[alerts.webhook]] or [[alerts.email]] to spool.toml.'))),
        h('section', { class: 'panel', id: 'alerts-drill' }, h('h2', {}, 'Last drill'),
          drillReport
            ? h('div', {}, h('p', {}, `${time(drillReport.at)} (${relative(drillReport.at)}) from ${drillReport.host_id}: `, status(drillReport.ok ? 'ok' : 'failed')), outcomes(drillReport.channels))
            : h('p', {}, 'No drill on record.'),
          a.drill_due ? h('p', { class: 'error-text' }, 'A drill is due (none in the last 90 days).') : null,
          api.has('post', '/alerts/drill') ? h('button', { type: 'button', id: 'alerts-run-drill', onclick: drill }, 'Run a drill') : null),
        h('section', { class: 'panel', id: 'alerts-recent' }, h('h2', {}, 'Recent alerts'),
          table(['Sent', 'Event', 'Alert', 'Message', 'Host', 'Channels'], a.recent ?? [],
            (r) => [time(r.sent_at), status(r.event), h('code', {}, r.alert), r.message, r.host_id, outcomes(r.channels)],
            'No alert sent yet.')),
      );
    }

    return { refresh };
  },
};
