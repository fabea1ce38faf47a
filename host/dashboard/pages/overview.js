// Overview: the queue's counts, the backlog curve (pending, running and failed per type),
// tasks finished per minute by outcome, attempt time p50/p95, the oldest pending task's age,
// and the latest tasks.

import * as api from '../api.js';
import { h, add, fill, clip, duration, status, table, taskLink, time, unavailable } from '../dom.js';
import { COLOURS, DASH, LineChart } from '../charts.js';

const WINDOWS = [['1h', 'last hour'], ['1d', 'last day'], ['7d', 'last week']];
/** Points the live curve keeps when the host has no GET /stats (an hour at 3 s). */
const LIVE_POINTS = 1200;

export default {
  title: 'Overview',
  mount(root) {
    let span = sessionStorage.getItem('spool.window') ?? '1h';
    const hasStats = api.has('get', '/stats');
    const cards = h('section', { class: 'cards', id: 'counts' });
    const windows = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Window' },
      WINDOWS.map(([value, label]) => h('button', {
        type: 'button', dataset: { window: value }, class: value === span ? 'on' : '',
        title: label,
        onclick: () => {
          span = value;
          sessionStorage.setItem('spool.window', value);
          for (const b of windows.querySelectorAll('button')) b.classList.toggle('on', b.dataset.window === value);
          refresh();
        },
      }, value)));
    const backlogBox = h('div', { class: 'chart', id: 'backlog-chart' });
    const finishedBox = h('div', { class: 'chart', id: 'finished-chart' });
    const attemptBox = h('div', { class: 'chart', id: 'attempt-chart' });
    const oldestBox = h('div', { class: 'chart', id: 'oldest-chart' });
    const oldestNow = h('p', { class: 'muted small', id: 'oldest-now' });
    const backlogNote = h('p', { class: 'muted small' });
    const recent = h('section', { id: 'recent' });
    const count = (n) => Math.round(n).toLocaleString();
    const charts = {
      backlog: new LineChart(backlogBox, { format: count }),
      finished: hasStats ? new LineChart(finishedBox, { format: count }) : null,
      attempt: hasStats ? new LineChart(attemptBox, { format: duration, emptyMax: 1000 }) : null,
      oldest: hasStats ? new LineChart(oldestBox, { format: duration, height: 160, emptyMax: 1000 }) : null,
    };
    const live = { xs: [], pending: [], running: [], failed: [] };

    add(root, 
      h('h1', {}, 'Overview'),
      cards,
      h('section', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Backlog'), hasStats ? windows : null),
        backlogNote, backlogBox),
      hasStats
        ? h('div', { class: 'grid2' },
          h('section', { class: 'panel' }, h('h2', {}, 'Finished per minute, by outcome'), finishedBox),
          h('section', { class: 'panel' }, h('h2', {}, 'Attempt time (p50, p95)'), attemptBox),
          h('section', { class: 'panel' }, h('h2', {}, 'Oldest pending task'), oldestNow, oldestBox))
        : h('section', { class: 'panel' },
          unavailable('Finished per minute, attempt times and the oldest pending age', 'GET /stats')),
      h('section', { class: 'panel' }, h('h2', {}, 'Latest tasks'), recent),
    );

    async function refresh() {
      const [health, latest, stats] = await Promise.all([
        api.get('/health'),
        api.get('/tasks?limit=10'),
        hasStats ? api.get(`/stats?window=${span}`) : null,
      ]);
      showCounts(health);
      if (stats) showStats(stats);
      else showLive(health);
      fill(recent, table(
        ['Task', 'Type', 'Status', 'Created', 'Finished', 'Last error'],
        latest.tasks,
        (t) => [taskLink(t.id), t.task_type, status(t.status), time(t.created_at), time(t.finished_at), clip(t.last_error, 80)],
        'No tasks yet.',
      ));
    }

    function showCounts(health) {
      const c = health.counts ?? {};
      const card = (label, value, href) => h(href ? 'a' : 'div', { class: `card card-${label}`, href },
        h('div', { class: 'card-value' }, value ?? '—'), h('div', { class: 'card-label' }, label));
      fill(cards, 
        card('pending', c.pending),
        card('running', c.running),
        card('done', c.done),
        card('failed', c.failed, '#/dead-letters'),
        card('cancelled', c.cancelled),
        h('div', { class: 'card card-host' },
          h('div', { class: 'card-value small' }, health.database === 'ok' ? 'database ok' : health.database),
          h('div', { class: 'card-label' }, `leader: ${health.leader ?? 'none'}${health.leading ? ' (this host)' : ''}`)),
      );
    }

    /** Without GET /stats: the totals from GET /health, sampled while the page is open. */
    function showLive(health) {
      const c = health.counts ?? {};
      live.xs.push(Date.now() / 1000);
      live.pending.push(c.pending ?? null);
      live.running.push(c.running ?? null);
      live.failed.push(c.failed ?? null);
      for (const key of Object.keys(live)) live[key] = live[key].slice(-LIVE_POINTS);
      backlogNote.textContent = 'All task types, sampled every few seconds since this page opened (this host has no GET /stats for history).';
      charts.backlog.set(live.xs, [
        { label: 'pending', values: live.pending },
        { label: 'running', values: live.running },
        { label: 'failed', values: live.failed },
      ]);
    }

    function showStats(stats) {
      const s = statsSeries(stats);
      backlogNote.textContent = s.xs.length
        ? `Per task type, ${WINDOWS.find(([w]) => w === span)[1]}, one point per ${duration(s.stepMs)}.`
        : 'No points yet: the host samples the queue every stats interval.';
      charts.backlog.set(s.xs, s.backlog, s.range);
      charts.finished.set(s.xs, s.finished, s.range);
      charts.attempt.set(s.xs, s.attempt, s.range);
      charts.oldest.set(s.xs, s.oldest, s.range);
      oldestNow.textContent = s.oldestNowMs > 0
        ? `Now: the oldest due task has waited ${duration(s.oldestNowMs)}.`
        : 'Now: no task is waiting past its due time.';
    }

    return {
      refresh,
      unmount() {
        Object.values(charts).forEach((chart) => chart?.destroy());
      },
    };
  },
};

/**
 * The answer of GET /stats as chart series. It has `step_seconds` and `series`, one per task
 * type, each with `points` (oldest first): `at`, `pending`, `running`, `failed`,
 * `oldest_pending_seconds`, `finished_per_minute` {done, failed, cancelled}, `attempt_p50_ms`,
 * `attempt_p95_ms`. A type without a point at some time was idle then (zero, not unknown).
 */
export function statsSeries(stats) {
  const all = (stats.series ?? []).flatMap((s) => s.points.map((p) => ({ ...p, task_type: s.task_type })));
  const times = [...new Set(all.map((p) => Date.parse(p.at)))].sort((a, b) => a - b);
  const index = new Map(times.map((t, i) => [t, i]));
  const zeros = () => times.map(() => 0);
  const gaps = () => times.map(() => null);
  const backlog = new Map();
  (stats.series ?? []).forEach((s, n) => {
    for (const state of ['pending', 'running', 'failed']) {
      backlog.set(`${s.task_type} ${state}`, { colour: COLOURS[n % COLOURS.length], dash: DASH[state], values: zeros() });
    }
  });
  const finished = { done: zeros(), failed: zeros(), cancelled: zeros() };
  const p50 = gaps();
  const p95 = gaps();
  const oldest = gaps();
  for (const p of all) {
    const i = index.get(Date.parse(p.at));
    for (const state of ['pending', 'running', 'failed']) backlog.get(`${p.task_type} ${state}`).values[i] = p[state];
    for (const outcome of ['done', 'failed', 'cancelled']) finished[outcome][i] += p.finished_per_minute?.[outcome] ?? 0;
    // Across types, the slowest type's percentiles and the longest wait: the worst case shows.
    if (p.attempt_p50_ms != null) p50[i] = Math.max(p50[i] ?? 0, p.attempt_p50_ms);
    if (p.attempt_p95_ms != null) p95[i] = Math.max(p95[i] ?? 0, p.attempt_p95_ms);
    if (p.oldest_pending_seconds != null) oldest[i] = Math.max(oldest[i] ?? 0, p.oldest_pending_seconds * 1000);
  }
  const now = (stats.current ?? []).reduce((worst, c) => Math.max(worst, c.oldest_pending_seconds ?? 0), 0);
  return {
    xs: times.map((t) => t / 1000),
    stepMs: (stats.step_seconds ?? 0) * 1000,
    oldestNowMs: now * 1000,
    range: stats.from && stats.to ? [Date.parse(stats.from) / 1000, Date.parse(stats.to) / 1000] : null,
    // A state that stayed at zero all window long is left out: the legend names what moved.
    backlog: [...backlog].filter(([, s]) => s.values.some((v) => v > 0)).map(([label, s]) => ({ label, ...s })),
    finished: Object.entries(finished).map(([label, values]) => ({ label, values })),
    attempt: [{ label: 'p50', values: p50 }, { label: 'p95', values: p95 }],
    oldest: [{ label: 'oldest pending', values: oldest }],
  };
}
