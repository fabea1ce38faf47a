// Line charts with uPlot (vendor/uplot, loaded by index.html as the global `uPlot`).
// A chart keeps its uPlot instance across refreshes and only swaps the data; it draws again
// from scratch when the set of series changes. The element's `data-points` attribute says how
// many points the chart shows, for people and tests alike.

export const COLOURS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
const BY_NAME = { pending: '#2563eb', running: '#d97706', failed: '#dc2626', done: '#16a34a', cancelled: '#6b7280', p50: '#2563eb', p95: '#7c3aed' };

/** A colour for a series: by its last word when it names a state, otherwise by position. */
export function colour(label, index) {
  const word = String(label).split(/[\s:/]+/).pop();
  return BY_NAME[word] ?? COLOURS[index % COLOURS.length];
}

/** Line styles that tell a type's states apart while its colour stays the type's. */
export const DASH = { pending: undefined, running: [2, 3], failed: [8, 4] };

export class LineChart {
  /** `format(value)` labels the y axis and the legend. */
  /** `emptyMax`: the top of the y axis while every value is 0 (1 for counts, 1000 for ms). */
  constructor(container, { format = (v) => v, height = 220, emptyMax = 1 } = {}) {
    this.container = container;
    this.format = format;
    this.height = height;
    this.emptyMax = emptyMax;
    this.xRange = null;
    this.plot = null;
    this.labels = '';
    this.resize = () => this.plot?.setSize(this.size());
    window.addEventListener('resize', this.resize);
  }

  size() {
    return { width: Math.max(this.container.clientWidth, 300), height: this.height };
  }

  /**
   * `xs`: Unix seconds; `series`: [{label, values, colour?, dash?}] with one value (or null) per
   * x; `xRange`: [from, to] in Unix seconds to show (the whole window), else the data's span.
   */
  set(xs, series, xRange = null) {
    this.xRange = xRange;
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
            stroke: s.colour ?? colour(s.label, i),
            dash: s.dash,
            width: 2,
            value: (_, v) => (v === null || v === undefined ? '—' : this.format(v)),
            points: { show: xs.length < 60 },
          })),
        ],
        axes: [{}, { values: (_, ticks) => ticks.map((v) => this.format(v)), size: 70 }],
        scales: {
          x: { time: true, range: (_, min, max) => this.xRange ?? [min, max] },
          y: { range: (_, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : this.emptyMax] },
        },
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
