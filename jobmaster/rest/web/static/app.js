// weir's web dashboard: hash routing (shareable URLs), live refresh at the cluster's
// refresh interval (paused while the tab is hidden), the token asked for on a 401.
import { render } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { api, html, onAuthRequired, setToken, token, useApi, ErrorNotice } from "./js/api.js";
import { JobPage } from "./js/job.js";
import * as fmt from "./js/format.js";

/** The route the location's hash names: {page, jobId, tab, item, tmId}. */
function parseHash(hash) {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) return { page: "job", jobId: parts[1], tab: parts[2], item: parts[3] };
  if (parts[0] === "taskmanagers" && parts[1]) return { page: "taskmanager", tmId: parts[1] };
  if (parts[0] === "taskmanagers") return { page: "taskmanagers" };
  return { page: "overview" };
}

function JobsTable({ jobs, now }) {
  if (!jobs.length) return html`<div class="empty">No job has been submitted.</div>`;
  const ordered = jobs.slice().sort((a, b) => (b["start-time"] || 0) - (a["start-time"] || 0));
  return html`<div class="table-wrap"><table class="jobs">
    <thead><tr><th>Name</th><th>State</th><th>Started</th><th class="num">Duration</th>
      <th class="num">Tasks running</th><th class="num">Restarts</th><th>Job ID</th></tr></thead>
    <tbody>${ordered.map((j) => html`
      <tr class="clickable job" data-job-id=${j.jid} onClick=${() => { location.hash = `#/jobs/${j.jid}/graph`; }}>
        <td><a href=${`#/jobs/${j.jid}/graph`}>${j.name}</a></td>
        <td><span class=${`badge ${j.state}`}>${j.state}</span></td>
        <td>${fmt.time(j["start-time"])} <span class="muted small">${fmt.ago(j["start-time"], now)}</span></td>
        <td class="num">${fmt.duration(j.duration)}</td>
        <td class="num">${j.tasks.running}/${j.tasks.total}</td>
        <td class="num">${j.restarts ?? 0}</td>
        <td class="mono muted">${j.jid}</td></tr>`)}</tbody></table></div>`;
}

function Overview({ tick }) {
  const overview = useApi("overview", tick);
  const jobs = useApi("jobs/overview", tick);
  const o = overview.data;
  return html`
    <${ErrorNotice} error=${overview.error || jobs.error} />
    ${o ? html`<div class="cards overview">
      <div class="card"><div class="label">TaskExecutors</div><div class="value" data-count="taskmanagers"><a href="#/taskmanagers">${o.taskmanagers}</a></div></div>
      <div class="card"><div class="label">Slots available</div><div class="value" data-count="slots">${o["slots-available"]} <small>of ${o["slots-total"]}</small></div></div>
      <div class="card"><div class="label">Jobs running</div><div class="value" data-count="jobs-running">${o["jobs-running"]}</div></div>
      <div class="card"><div class="label">Finished</div><div class="value">${o["jobs-finished"]}</div></div>
      <div class="card"><div class="label">Canceled</div><div class="value">${o["jobs-cancelled"]}</div></div>
      <div class="card"><div class="label">Failed</div><div class="value">${o["jobs-failed"]}</div></div>
    </div>` : html`<div class="muted">Loading the overview…</div>`}
    <h2>Jobs</h2>
    ${jobs.data ? html`<${JobsTable} jobs=${jobs.data.jobs} />` : ""}
    <h2>TaskExecutors</h2>
    <${TaskManagersTable} tick=${tick} />`;
}

function TaskManagersTable({ tick }) {
  const { data, error } = useApi("taskmanagers", tick);
  if (error) return html`<${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted">Loading TaskExecutors…</div>`;
  if (!data.taskmanagers.length) return html`<div class="empty">No TaskExecutor is registered.</div>`;
  return html`<div class="table-wrap"><table class="taskmanagers">
    <thead><tr><th>Resource ID</th><th>Address</th><th>Data address</th><th class="num">Slots</th>
      <th class="num">Free slots</th><th class="num">Tasks</th><th class="num">Task failures</th>
      <th>Registered</th><th class="num">PID</th><th>Metrics</th></tr></thead>
    <tbody>${data.taskmanagers.map((tm) => html`
      <tr class="clickable taskmanager" data-taskmanager-id=${tm.id}
          onClick=${() => { location.hash = `#/taskmanagers/${encodeURIComponent(tm.id)}`; }}>
        <td class="mono"><a href=${`#/taskmanagers/${encodeURIComponent(tm.id)}`}>${tm.id}</a></td>
        <td class="mono">${tm.path}</td><td class="mono">${tm["data-address"] || "–"}</td>
        <td class="num">${tm.slotsNumber}</td><td class="num">${tm.freeSlots}</td>
        <td class="num">${tm["tasks-running"] ?? "–"}</td>
        <td class=${`num${tm["task-failures"] ? " warn" : ""}`}>${tm["task-failures"] ?? "–"}</td>
        <td>${registered(tm)}</td>
        <td class="num">${tm.pid || "–"}</td>
        <td>${tm["metrics-url"] ? html`<a href=${tm["metrics-url"]} target="_blank" rel="noopener" onClick=${(e) => e.stopPropagation()}>/metrics</a>` : "–"}</td>
      </tr>`)}</tbody></table></div>`;
}

/** When a TaskExecutor registered, and how often its resource id did (it restarted). */
function registered(tm) {
  if (!tm["registered-at"]) return "–";
  const again = tm.registrations > 1 ? html` <span class="warn small">${tm.registrations - 1}× re-registered</span>` : "";
  return html`${fmt.time(tm["registered-at"])} <span class="muted small">${fmt.ago(tm["registered-at"])}</span>${again}`;
}

function KeyValues({ title, values }) {
  const entries = Object.entries(values || {});
  if (!entries.length) return "";
  return html`<div class="panel"><h3 style="margin-top:0">${title}</h3><dl class="kv">${entries.map(([k, v]) =>
    html`<dt>${k}</dt><dd>${typeof v === "number" && /memory|size|bytes/i.test(k) ? fmt.bytes(v) : typeof v === "object" ? JSON.stringify(v) : String(v)}</dd>`)}</dl></div>`;
}

function TaskManagerPage({ tmId, tick }) {
  const { data, error } = useApi(`taskmanagers/${encodeURIComponent(tmId)}`, tick);
  const metrics = useApi(`taskmanagers/${encodeURIComponent(tmId)}/metrics?get=Status.Slots.Total,Status.Slots.Free`, tick);
  if (error) return html`<p><a href="#/taskmanagers">← TaskExecutors</a></p><${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted">Loading TaskExecutor ${tmId}…</div>`;
  return html`
    <p class="small"><a href="#/taskmanagers">← TaskExecutors</a></p>
    <h1 class="mono">${data.id}</h1>
    <div class="cards">
      <div class="card"><div class="label">Slots</div><div class="value">${data.slotsNumber}</div></div>
      <div class="card"><div class="label">Free slots</div><div class="value">${data.freeSlots}</div></div>
      <div class="card"><div class="label">Tasks running</div><div class="value">${data["tasks-running"] ?? "–"}</div></div>
      <div class="card"><div class="label">Task failures</div><div class="value">${data["task-failures"] ?? "–"}</div></div>
      <div class="card"><div class="label">Registered</div><div class="value small">${registered(data)}</div></div>
      <div class="card"><div class="label">PID</div><div class="value">${data.pid || "–"}</div></div>
    </div>
    <div class="grid2">
      <div class="panel"><h3 style="margin-top:0">Addresses</h3><dl class="kv">
        <dt>RPC</dt><dd class="mono">${data.path}</dd>
        <dt>Data</dt><dd class="mono">${data["data-address"] || "–"}</dd>
        <dt>Data port</dt><dd>${data.dataPort}</dd>
        <dt>Metrics</dt><dd>${data["metrics-url"] ? html`<a href=${data["metrics-url"]} target="_blank" rel="noopener">${data["metrics-url"]}</a>` : "–"}</dd>
      </dl></div>
      <div class="panel"><h3 style="margin-top:0">Metrics</h3>
        ${metrics.data && metrics.data.length ? html`<dl class="kv">${metrics.data.map((m) => html`<dt>${m.id}</dt><dd>${m.value}</dd>`)}</dl>` : html`<span class="muted">none</span>`}
        <p class="small muted">Its tasks' metrics (records, checkpoints, watermarks) are on the TaskExecutor's own /metrics endpoint.</p></div>
    </div>
    <${KeyValues} title="Hardware" values=${data.hardware} />
    <${KeyValues} title="Memory" values=${data.memoryConfiguration} />
    <${KeyValues} title="Resources" values=${data.totalResource} />`;
}

function Login({ onDone, failed }) {
  const [value, setValue] = useState("");
  const submit = (e) => { e.preventDefault(); setToken(value.trim()); onDone(); };
  return html`<form class="panel login" onSubmit=${submit}>
    <h2 style="margin-top:0">This cluster needs its token</h2>
    <p class="muted small">The REST API answered 401. Enter the cluster's
      <code>security.auth.token</code>; it is kept in this tab only (sessionStorage) and sent as
      <code>Authorization: Bearer …</code> with each request.</p>
    ${failed ? html`<div class="notice error small">The token was refused.</div>` : ""}
    <input type="password" name="token" autocomplete="off" placeholder="token" value=${value}
           onInput=${(e) => setValue(e.target.value)} autofocus />
    <button class="primary" type="submit">Open the dashboard</button>
  </form>`;
}

function App() {
  const [route, setRoute] = useState(parseHash(location.hash));
  const [tick, setTick] = useState(0);
  const [interval, setIntervalMs] = useState(3000);
  const [version, setVersion] = useState("");
  const [needsToken, setNeedsToken] = useState(false);
  const [paused, setPaused] = useState(false);
  const [refreshed, setRefreshed] = useState(Date.now());
  const refresh = useCallback(() => { setTick((t) => t + 1); setRefreshed(Date.now()); }, []);

  useEffect(() => {
    const onHash = () => setRoute(parseHash(location.hash));
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  useEffect(() => onAuthRequired(() => setNeedsToken(true)), []);
  useEffect(() => {
    if (needsToken) return;
    api("config").then((c) => {
      setIntervalMs(Math.max(500, c["refresh-interval"] || 3000));
      setVersion(c["flink-version"] || "");
    }, () => {});
  }, [needsToken]);
  useEffect(() => {
    if (paused || needsToken) return undefined;
    const timer = setInterval(() => { if (!document.hidden) refresh(); }, interval);
    const onVisible = () => { if (!document.hidden) refresh(); };
    document.addEventListener("visibilitychange", onVisible);
    return () => { clearInterval(timer); document.removeEventListener("visibilitychange", onVisible); };
  }, [interval, paused, needsToken]);

  const navigate = (hash) => { if (location.hash !== hash) location.hash = hash; };
  let page;
  if (needsToken) {
    page = html`<${Login} failed=${Boolean(token())} onDone=${() => { setNeedsToken(false); refresh(); }} />`;
  } else if (route.page === "job") {
    page = html`<${JobPage} key=${route.jobId} route=${route} tick=${tick} navigate=${navigate} refresh=${refresh} />`;
  } else if (route.page === "taskmanagers") {
    page = html`<h1>TaskExecutors</h1><${TaskManagersTable} tick=${tick} />`;
  } else if (route.page === "taskmanager") {
    page = html`<${TaskManagerPage} tmId=${route.tmId} tick=${tick} />`;
  } else {
    page = html`<${Overview} tick=${tick} />`;
  }
  const active = (name) => (route.page === name || (name === "taskmanagers" && route.page === "taskmanager") ? "active" : "");
  return html`
    <header class="top">
      <a class="brand" href="#/overview">weir <span>dashboard</span></a>
      <nav>
        <a href="#/overview" class=${active("overview") || (route.page === "job" ? "active" : "")}>Jobs</a>
        <a href="#/taskmanagers" class=${active("taskmanagers")}>TaskExecutors</a>
      </nav>
      <div class="meta">
        <span title="refresh interval">${paused ? "paused" : `every ${fmt.duration(interval)}`} · updated ${fmt.time(refreshed)}</span>
        <button onClick=${() => setPaused(!paused)}>${paused ? "Resume" : "Pause"}</button>
        ${version ? html`<span>weir ${version}</span>` : ""}
      </div>
    </header>
    <main>${page}</main>`;
}

const root = document.getElementById("app");
root.textContent = "";  // the loading note: render() would keep it
render(html`<${App} />`, root);
