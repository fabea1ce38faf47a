// Small helpers to build the page without innerHTML (so task data is never parsed as HTML)
// and to format times, durations and JSON.

/** An element: `h('a', {href: '#/x', class: 'y'}, 'text', child)`. `on*` props add listeners. */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'class') {
      element.className = value;
    } else if (name === 'dataset') {
      Object.assign(element.dataset, value);
    } else if (name in element && typeof value !== 'string') {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

/** Replaces an element's children (skipping null, undefined and false, which the DOM would show as text). */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** Appends children, skipping null, undefined and false. */
export function add(element, ...children) {
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

/** A table with a header row and one row per item (`row(item)` gives the cells). */
export function table(headers, items, row, empty = 'Nothing here.') {
  if (!items.length) return h('p', { class: 'muted' }, empty);
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map((title) => h('th', {}, title)))),
    h('tbody', {}, items.map((item) => h('tr', {}, row(item).map((cell) =>
      cell instanceof Node && cell.tagName === 'TD' ? cell : h('td', {}, cell))))));
}

/** A notice that a part of the dashboard needs an endpoint this host does not have. */
export function unavailable(what, endpoint) {
  return h('div', { class: 'notice unavailable' },
    `${what} is not available on this host: it needs ${endpoint}, which this host's API does not have (see GET /openapi.json).`);
}

/** An error box. */
export function errorBox(error) {
  return h('div', { class: 'notice error' }, error?.message ?? String(error));
}

/** A local date and time, or an em dash. */
export function time(value) {
  if (!value) return '—';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

/** "3 min ago" / "in 5 s". */
export function relative(value) {
  if (!value) return '—';
  const ms = new Date(value).getTime() - Date.now();
  const text = duration(Math.abs(ms));
  return ms < 0 ? `${text} ago` : `in ${text}`;
}

/** A duration in milliseconds as "850 ms", "12.3 s", "4 min", "2 h 5 min", "3 d". */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

/** A measured size in bytes as "900 B", "64 KiB", "1.1 MiB" (one decimal below 10 of a unit). */
export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n) || n <= 0) return '—';
  for (const [size, unit] of [[2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB']]) {
    if (n >= size) {
      const value = n / size;
      return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${unit}`;
    }
  }
  return `${n} B`;
}

/** A fuel count as "1.2 M", "350 k" (three digits at most). */
export function fuel(n) {
  if (n === null || n === undefined) return '—';
  if (n >= 1e9) return `${(n / 1e9).toPrecision(3)} G`;
  if (n >= 1e6) return `${(n / 1e6).toPrecision(3)} M`;
  if (n >= 1e3) return `${(n / 1e3).toPrecision(3)} k`;
  return String(n);
}

/** JSON as indented text (strings as they are). */
export function json(value) {
  if (value === undefined || value === null) return '—';
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

/** The first characters of a version hash. */
export function shortVersion(version) {
  return version ? String(version).slice(0, 12) : '—';
}

/** A link to a task's page. */
export function taskLink(id) {
  return h('a', { href: `#/task/${id}` }, `#${id}`);
}

/** A status as a coloured label. */
export function status(value) {
  return h('span', { class: `status status-${value}` }, value);
}

/** Text cut to `max` characters, the whole of it in the tooltip. */
export function clip(text, max = 120) {
  if (!text) return '—';
  return text.length <= max ? text : h('span', { title: text }, `${text.slice(0, max)}…`);
}
