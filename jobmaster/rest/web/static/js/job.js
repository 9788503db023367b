// One job: its header and actions, and the tabs (graph, checkpoints, recoveries,
// exceptions, watermarks). Only the visible tab fetches.
import { useState } from "preact/hooks";
import { api, html, useApi, useApiMany, ErrorNotice } from "./api.js";
import { JobGraph, VertexPanel } from "./graph.js";
import { CheckpointsTab } from "./checkpoints.js";
import { Chart } from "./charts.js";
import * as fmt from "./format.js";

const TABS = [["graph", "Graph"], ["checkpoints", "Checkpoints"], ["recoveries", "Recoveries"],
              ["exceptions", "Exceptions"], ["watermarks", "Watermarks"]];
const ENDED = new Set(["FINISHED", "CANCELED", "FAILED"]);

function Actions({ job, onDone }) {
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState(null);
  const running = !ENDED.has(job.state);
  const cancel = async () => {
    if (!window.confirm(`Cancel job "${job.name}" (${job.jid})? Its tasks stop now.`)) return;
    setBusy(true);
    try {
      await api(`jobs/${job.jid}?mode=cancel`, { method: "PATCH" });
      setMessage({ kind: "info", text: "Cancellation requested." });
    } catch (err) { setMessage({ kind: "error", text: err.message }); }
    setBusy(false);
    onDone();
  };
  const savepoint = async () => {
    const target = window.prompt("Take a savepoint of the job. Target directory (empty: the " +
                                 "configured state.savepoints.dir):", "");
    if (target === null) return;
    setBusy(true);
    setMessage({ kind: "info", text: "Savepoint in progress…" });
    try {
      const body = { "cancel-job": false };
      if (target.trim()) body["target-directory"] = target.trim();
      const { "request-id": trigger } = await api(`jobs/${job.jid}/savepoints`, { method: "POST", body });
      const deadline = Date.now() + 10 * 60 * 1000;
      for (;;) {
        const status = await api(`jobs/${job.jid}/savepoints/${trigger}`);
        if (status.status.id === "COMPLETED") {
          const op = status.operation || {};
          setMessage(op["failure-cause"]
            ? { kind: "error", text: `Savepoint failed: ${op["failure-cause"]["stack-trace"] || op["failure-cause"].class || "see the JobMaster log"}` }
            : { kind: "info", text: `Savepoint stored at ${op.location}` });
          break;
        }
        if (Date.now() > deadline) { setMessage({ kind: "error", text: "The savepoint did not complete in 10 minutes." }); break; }
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    } catch (err) { setMessage({ kind: "error", text: err.message }); }
    setBusy(false);
    onDone();
  };
  return html`
    <div class="actions-wrap">
      <div class="actions">
        <button disabled=${busy || !running} onClick=${savepoint}>Trigger savepoint</button>
        <button class="danger" disabled=${busy || !running} onClick=${cancel}>Cancel job</button>
      </div>
      ${message ? html`<div class=${`notice ${message.kind} action-message small`}>${message.text}</div>` : ""}
    </div>`;
}

/** Restarts and restores: the job's `recoveries` when it reports them, else what it has. */
function RecoveriesTab({ jobId, job, tick }) {
  const recoveries = job.recoveries;
  const exceptions = useApi(recoveries ? null : `jobs/${jobId}/exceptions`, tick);
  const restore = job["last-restore"];
  const cards = html`
    <div class="cards">
      <div class="card"><div class="label">Restarts</div><div class="value" data-count="restarts">${job.restarts ?? 0}</div></div>
      <div class="card"><div class="label">Last restore</div><div class="value">${restore ? html`#${restore["checkpoint-id"]} <small>${fmt.duration(restore.duration)}</small>` : "–"}</div></div>
      <div class="card"><div class="label">Read locally</div><div class="value">${restore ? fmt.bytes(restore["local-bytes"]) : "–"}</div></div>
      <div class="card"><div class="label">Downloaded</div><div class="value">${restore ? fmt.bytes(restore["remote-bytes"]) : "–"}</div></div>
    </div>`;
  if (recoveries) {
    const ordered = recoveries.slice().reverse();
    return html`${cards}
      ${ordered.length >= 2 ? html`<div class="panel"><h3 style="margin-top:0">Recovery time</h3>
        <${Chart} time=${true} xLabel="time" data=${[ordered.map((r) => r.timestamp / 1000),
          ordered.map((r) => r.duration), ordered.map((r) => r["local-bytes"] + r["remote-bytes"])]}
          series=${[{ label: "duration", stroke: "#1f5f99", scale: "ms", value: fmt.duration },
                    { label: "bytes restored", stroke: "#c0392b", scale: "B", value: fmt.bytes }]}
          axes=${[{ scale: "ms", values: fmt.duration }, { scale: "B", values: fmt.bytes }]} /></div>` : ""}
      ${recoveries.length === 0 ? html`<div class="empty">The job has not restarted.</div>` : html`
      <div class="table-wrap"><table class="recoveries">
        <thead><tr><th>When</th><th>Cause</th><th class="num">Tasks</th><th>Checkpoint</th>
          <th class="num">Recovery took</th><th class="num">Read locally</th><th class="num">Downloaded</th></tr></thead>
        <tbody>${recoveries.map((r) => html`<tr class="recovery">
          <td>${fmt.time(r.timestamp)} <span class="muted small">${fmt.ago(r.timestamp)}</span></td>
          <td class="wrap cause">${r.exceptionName ? html`<b>${r.exceptionName}</b> ` : ""}${r.cause}</td>
          <td class="num">${r.tasks}</td><td>${r["checkpoint-id"] ? `#${r["checkpoint-id"]}` : "none"}</td>
          <td class="num">${r.duration === null ? "in progress" : fmt.duration(r.duration)}</td>
          <td class="num">${fmt.bytes(r["local-bytes"])}</td><td class="num">${fmt.bytes(r["remote-bytes"])}</td>
        </tr>`)}</tbody></table></div>`}`;
  }
  const entries = (exceptions.data && exceptions.data.exceptionHistory.entries) || [];
  return html`${cards}
    <div class="notice info small">This JobMaster reports the last restore only; the causes of
      the restarts are the job's exception history.</div>
    ${entries.length === 0 ? html`<div class="empty">${job.restarts ? "No restart cause recorded." : "The job has not restarted."}</div>` : html`
    <div class="table-wrap"><table class="recoveries">
      <thead><tr><th>When</th><th>Cause</th><th>Task</th></tr></thead>
      <tbody>${entries.map((e) => html`<tr class="recovery">
        <td>${e.timestamp ? fmt.time(e.timestamp) : "–"}</td>
        <td class="wrap cause"><b>${e.exceptionName}</b>${e.reason && e.reason !== e.exceptionName ? ` (${e.reason})` : ""} ${e.message || ""}</td>
        <td>${e.taskName || "–"}</td></tr>`)}</tbody></table></div>`}`;
}

function ExceptionsTab({ jobId, tick }) {
  const { data, error } = useApi(`jobs/${jobId}/exceptions`, tick);
  if (error) return html`<${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted">Loading exceptions…</div>`;
  const entries = data.exceptionHistory.entries;
  if (!entries.length) return html`<div class="empty">No exception: the job has not failed or restarted.</div>`;
  return html`<div class="exceptions">${entries.map((e, i) => html`
    <div class="panel exception">
      <div><b>${e.exceptionName}</b>${e.reason && e.reason !== e.exceptionName ? html` <span class="badge">${e.reason}</span>` : ""}
        <span class="muted small" style="float:right">${e.timestamp ? `${fmt.time(e.timestamp)} · ${fmt.ago(e.timestamp)}` : "time not recorded"}</span></div>
      <div class="wrap">${e.message}</div>
      <div class="small muted">Task: ${e.taskName || "–"}${e.taskManagerId ? ` · TaskExecutor ${e.taskManagerId}` : ""}</div>
      <details open=${i === 0}><summary>Traceback</summary><pre class="trace">${e.stacktrace}</pre></details>
    </div>`)}</div>`;
}

function WatermarksTab({ jobId, job, tick }) {
  const vertices = job.vertices || [];
  const results = useApiMany(vertices.map((v) => `jobs/${jobId}/vertices/${v.id}/watermarks`), tick);
  return html`<div class="table-wrap"><table class="watermarks">
    <thead><tr><th>Vertex</th><th>Subtask</th><th>Current input watermark</th></tr></thead>
    <tbody>${vertices.map((v) => {
      const r = results[`jobs/${jobId}/vertices/${v.id}/watermarks`];
      if (!r) return html`<tr><td>${v.name}</td><td colspan="2" class="muted">loading…</td></tr>`;
      if (r.error) return html`<tr><td>${v.name}</td><td colspan="2" class="muted">${r.error.message}</td></tr>`;
      const marks = r.data.filter((m) => m.id.endsWith("currentInputWatermark"));
      if (!marks.length) return html`<tr data-vertex-id=${v.id}><td>${v.name}</td><td colspan="2" class="muted">no watermark</td></tr>`;
      return marks.map((m, i) => {
        const value = Number(m.value);
        const shown = !Number.isFinite(value) || value <= -9e15 ? "no watermark"
          : `${new Date(value).toISOString()} (${value})`;
        return html`<tr data-vertex-id=${v.id}><td>${i === 0 ? v.name : ""}</td>
          <td>${m.id.split(".")[0]}</td><td class="mono">${shown}</td></tr>`;
      });
    })}</tbody></table></div>`;
}

export function JobPage({ route, tick, navigate, refresh }) {
  const { jobId, tab = "graph", item } = route;
  const { data: job, error } = useApi(`jobs/${jobId}`, tick);
  if (error && !job) return html`<${ErrorNotice} error=${error} />`;
  if (!job) return html`<div class="muted">Loading job ${jobId}…</div>`;
  const go = (t, it) => navigate(`#/jobs/${jobId}/${t}${it !== undefined && it !== null ? `/${it}` : ""}`);
  const running = (job.vertices || []).reduce((n, v) => n + (v.tasks.RUNNING || 0), 0);
  const total = (job.vertices || []).reduce((n, v) => n + v.parallelism, 0);
  let body;
  if (tab === "checkpoints") {
    body = html`<${CheckpointsTab} jobId=${jobId} job=${job} tick=${tick}
      openId=${item ? Number(item) : null} onOpen=${(id) => go("checkpoints", id)} />`;
  } else if (tab === "recoveries") {
    body = html`<${RecoveriesTab} jobId=${jobId} job=${job} tick=${tick} />`;
  } else if (tab === "exceptions") {
    body = html`<${ExceptionsTab} jobId=${jobId} tick=${tick} />`;
  } else if (tab === "watermarks") {
    body = html`<${WatermarksTab} jobId=${jobId} job=${job} tick=${tick} />`;
  } else {
    body = html`
      <${JobGraph} job=${job} selected=${item} onSelect=${(id) => go("graph", item === id ? null : id)} />
      ${item ? html`<${VertexPanel} jobId=${jobId} vertexId=${item} tick=${tick} />`
             : html`<p class="muted small">Click a vertex for its subtasks.</p>`}`;
  }
  return html`
    <div class="jobhead">
      <div>
        <h1 class="job-name">${job.name} <span class=${`badge ${job.state}`} data-job-state=${job.state}>${job.state}</span></h1>
        <div class="facts">
          <span class="mono">${job.jid}</span>
          <span>started <b>${fmt.time(job["start-time"])}</b></span>
          <span>duration <b>${fmt.duration(job.duration)}</b></span>
          <span>tasks <b>${running}/${total}</b> running</span>
          <span>restarts <b>${job.restarts ?? 0}</b></span>
          ${job["last-checkpoint"] ? html`<span>last checkpoint <b>#${job["last-checkpoint"].id}</b></span>` : ""}
        </div>
      </div>
      <${Actions} job=${job} onDone=${refresh} />
    </div>
    ${error ? html`<${ErrorNotice} error=${error} />` : ""}
    <nav class="tabs">${TABS.map(([key, label]) => html`
      <a href=${`#/jobs/${jobId}/${key}`} class=${tab === key ? "active" : ""} data-tab=${key}>${label}${
        key === "recoveries" && job.restarts ? html`<span class="count">${job.restarts}</span>` : ""}</a>`)}</nav>
    ${body}`;
}
