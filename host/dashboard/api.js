// This host's API as the page uses it: which operations the host has (from its OpenAPI
// description, read once), the token (kept in sessionStorage, sent as a Bearer token), JSON
// in and out, and errors as exceptions that carry the API's message.

const TOKEN_KEY = 'spool.token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let spec = { paths: {} };
const unauthorizedListeners = new Set();

/** Reads GET /openapi.json, which needs no token; everything else is asked of it. */
export async function loadSpec() {
  const response = await fetch('/openapi.json', { cache: 'no-store' });
  if (!response.ok) throw new ApiError(response.status, 'spec', `GET /openapi.json answered ${response.status}`);
  spec = await response.json();
}

/** Whether this host has the operation: `has('get', '/stats')`. */
export function has(method, path) {
  return Boolean(spec.paths?.[path]?.[method]);
}

/** Whether `GET path` takes the query parameter `name`. */
export function hasParam(path, name) {
  return (spec.paths?.[path]?.get?.parameters ?? []).some((p) => p.name === name);
}

/** Whether this host asks for a token (its description then marks operations with `security`). */
export function tokenRequired() {
  return Boolean(spec.paths?.['/tasks']?.get?.security);
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** `listener(error)` runs when the API refuses the token. */
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

/** One API call; the answer's JSON, or an ApiError with the API's message. */
export async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const current = token();
  if (current) headers.Authorization = `Bearer ${current}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, 'network', `the host does not answer (${error.message}); is it still running?`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (response.ok) return data;
  const error = new ApiError(
    response.status,
    data?.error?.code ?? `http_${response.status}`,
    // GET /health answers 503 with its own body, which names the database that does not answer.
    data?.error?.message ?? (typeof data?.database === 'string' ? data.database : null)
      ?? `${method} ${path} answered ${response.status}`,
  );
  if (response.status === 401) unauthorizedListeners.forEach((listener) => listener(error));
  throw error;
}

export const get = (path) => call('GET', path);
export const post = (path, body = {}) => call('POST', path, body);

/** A query string from the entries whose value is set. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') search.set(name, value);
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}
