// Line charts with uPlot (vendor/uplot, loaded by index.html as the global `uPlot`).
// A chart keeps its uPlot instance across refreshes and only swaps the data; it draws again
// from scratch when the set of series changes. The element's `data-points` attribute says how
// many points the chart shows, for people and tests alike.

const COLOURS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
const BY_NAME = { pending: '#2563eb', running: '#d97706', failed: '#dc2626', done: '#16a34a', cancelled: '#6b7280', p50: '#2563eb', p95: '#7c3aed' };

/** A colour for a series: by its last word when it names a state, otherwise by position. */
export function colour(label, index) {
  const word = String(label).split(/[\s:/]+/).pop();
  return BY_NAME[word] ?? COLOURS[index % COLOURS.length];
}

export class LineChart {
  /** `format(value)` labels the y axis and the legend. */
  constructor(container, { format = (v) => v, height = 220, stacked = false } = {}) {
    this.container = container;
    this.format = format;
    this.height = height;
    this.stacked = stacked;
    this.plot = null;
    this.labels = '';
    this.resize = () => this.plot?.setSize(this.size());
    window.addEventListener('resize', this.resize);
  }

  size() {
    return { width: Math.max(this.container.clientWidth, 300), height: this.height };
  }

  /** `xs`: Unix seconds; `series`: [{label, values}] with one value (or null) per x. */
  set(xs, series) {
    const labels = series.map((s) => s.label).join('\u0000');
    const data = [xs, ...series.map((s) => s.values)];
    if (!this.plot || labels !== this.labels) {
      this.plot?.destroy();
      this.container.replaceChildren();
      this.labels = labels;
      this.plot = new uPlot({
        ...this.size(),
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: colour(s.label, i),
            width: 2,
            value: (_, v) => (v === null || v === undefined ? '—' : this.format(v)),
            points: { show: xs.length < 60 },
          })),
        ],
        axes: [{}, { values: (_, ticks) => ticks.map((v) => this.format(v)), size: 70 }],
        scales: { y: { range: (_, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
        legend: { live: true },
      }, data, this.container);
    } else {
      this.plot.setData(data);
    }
    this.container.dataset.points = String(xs.length);
  }

  destroy() {
    window.removeEventListener('resize', this.resize);
    this.plot?.destroy();
    this.plot = null;
  }
}
