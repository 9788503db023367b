// The REST API from the page: every request carries the token kept in sessionStorage; a
// 401 asks the page for one. Also the shared hooks (polling fetch) and the html tag.
import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

const TOKEN_KEY = "weir.dashboard.token";
const authListeners = new Set();

/** An answer other than 2xx, with the first of Flink's `errors` as message. */
export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export function token() { return sessionStorage.getItem(TOKEN_KEY); }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
}
/** Call `listener` whenever the API refuses the page (401). Returns the unsubscriber. */
export function onAuthRequired(listener) {
  authListeners.add(listener);
  return () => authListeners.delete(listener);
}

/** One request to the API (path relative to the page's origin); resolves to its JSON. */
export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => null);
  if (response.status === 401) authListeners.forEach((f) => f());
  if (!response.ok) {
    const message = (data && data.errors && data.errors[0]) || response.statusText;
    throw new ApiError(response.status, message);
  }
  return data;
}

/**
 * `path`'s JSON, fetched again whenever `tick` changes (the page's refresh); the last
 * answer stays shown while the next is on its way. A null `path` fetches nothing.
 * Returns {data, error}.
 */
export function useApi(path, tick = 0) {
  const [state, setState] = useState({ path: null, data: undefined, error: null });
  useEffect(() => {
    if (!path) return undefined;
    let live = true;
    api(path).then(
      (data) => live && setState({ path, data, error: null }),
      (error) => live && setState((s) => ({ path, data: s.path === path ? s.data : undefined,
                                            error })));
    return () => { live = false; };
  }, [path, tick]);
  return state.path === path ? state : { data: undefined, error: null };
}

/** Many paths at once, at most `limit` requests in flight (no fetch storm). */
export function useApiMany(paths, tick = 0, limit = 4) {
  const key = paths.join("\n");
  const [state, setState] = useState({ key: null, data: {} });
  useEffect(() => {
    let live = true;
    const results = {};
    let next = 0;
    const worker = async () => {
      while (live && next < paths.length) {
        const path = paths[next++];
        try { results[path] = { data: await api(path) }; }
        catch (error) { results[path] = { error }; }
      }
    };
    Promise.all(Array.from({ length: Math.min(limit, paths.length) }, worker)).then(() => {
      if (live) setState({ key, data: results });
    });
    return () => { live = false; };
  }, [key, tick]);
  return state.key === key ? state.data : {};
}

/** The error of a failed fetch as a notice. */
export function ErrorNotice({ error }) {
  if (!error) return null;
  return html`<div class="notice error">${error.status ? `${error.status}: ` : ""}${error.message}</div>`;
}
