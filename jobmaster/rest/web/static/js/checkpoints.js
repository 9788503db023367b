// The checkpoints tab: counts, configuration, a chart of duration and size, the history;
// a checkpoint opens into its vertices, a vertex into its subtasks.
import { useState } from "preact/hooks";
import { html, useApi, ErrorNotice } from "./api.js";
import { Chart } from "./charts.js";
import * as fmt from "./format.js";

function kind(c) {
  if (c.is_savepoint) return html`<span class="badge savepoint">savepoint</span>`;
  return c.checkpoint_type === "UNALIGNED_CHECKPOINT"
    ? html`<span class="badge unaligned">unaligned</span>`
    : html`<span class="badge aligned">aligned</span>`;
}

/**
 * A checkpointed size, and with the changelog state backend what the full state is and how
 * much of it is the log (the rest is the last materialization).
 */
function Size({ entry }) {
  const log = entry.changelog_state_size || 0;
  return html`${fmt.bytes(entry.checkpointed_size)}${log > 0 ? html`<div class="muted small changelog-split"
    title="state a restore reads: materialized + log">of ${fmt.bytes(entry.state_size)}: log ${fmt.bytes(log)}</div>` : ""}`;
}

function SubtaskRows({ jobId, checkpointId, vertexId }) {
  const { data, error } = useApi(`jobs/${jobId}/checkpoints/details/${checkpointId}/subtasks/${vertexId}`);
  if (error) return html`<${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted small">Loading the subtasks…</div>`;
  return html`
    <table class="checkpoint-subtasks">
      <thead><tr><th class="num">Subtask</th><th>Status</th><th>Acknowledged</th>
        <th class="num">End to end</th><th class="num">Alignment</th><th class="num">Sync</th>
        <th class="num">Async</th><th class="num">Start delay</th><th class="num">Checkpointed size</th>
        <th class="num">Persisted in-flight</th><th>Unaligned</th></tr></thead>
      <tbody>${data.subtasks.map((s) => s.status !== "completed"
        ? html`<tr data-subtask=${s.index}><td class="num">${s.index}</td><td colspan="10" class="muted">${s.status.replaceAll("_", " ")}</td></tr>`
        : html`<tr data-subtask=${s.index}>
          <td class="num">${s.index}</td><td><span class="badge COMPLETED">completed</span></td>
          <td>${fmt.time(s.ack_timestamp)}</td>
          <td class="num">${fmt.duration(s.end_to_end_duration)}</td>
          <td class="num alignment">${fmt.duration(s.alignment.duration)}</td>
          <td class="num sync">${fmt.duration(s.checkpoint.sync)}</td>
          <td class="num async">${fmt.duration(s.checkpoint.async)}</td>
          <td class="num">${fmt.duration(s.start_delay)}</td>
          <td class="num"><${Size} entry=${s} /></td>
          <td class="num">${fmt.bytes(s.alignment.persisted)}</td>
          <td>${s.unaligned_checkpoint ? "yes" : "no"}</td></tr>`)}</tbody>
    </table>`;
}

function CheckpointDetail({ jobId, checkpoint, names, tick }) {
  const live = checkpoint.status === "IN_PROGRESS";
  const { data, error } = useApi(`jobs/${jobId}/checkpoints/details/${checkpoint.id}`, live ? tick : 0);
  const [open, setOpen] = useState(null);
  if (error) return html`<${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted small">Loading checkpoint ${checkpoint.id}…</div>`;
  const tasks = Object.entries(data.tasks || {});
  return html`
    <div class="checkpoint-detail">
      ${data.failure_message ? html`<div class="notice error">${data.failure_message}</div>` : ""}
      ${data.external_path ? html`<div class="small muted">Stored at <code>${data.external_path}</code></div>` : ""}
      <table class="checkpoint-vertices">
        <thead><tr><th>Vertex</th><th>Acknowledged</th><th>Latest ack</th><th class="num">End to end</th>
          <th class="num">Checkpointed size</th><th class="num">Processed in-flight</th>
          <th class="num">Persisted in-flight</th></tr></thead>
        <tbody>${tasks.map(([vid, t]) => html`
          <tr class=${`clickable${open === vid ? " open" : ""}`} data-vertex-id=${vid}
              onClick=${() => setOpen(open === vid ? null : vid)}>
            <td>${open === vid ? "▾" : "▸"} ${names[vid] || vid}</td>
            <td>${t.num_acknowledged_subtasks}/${t.num_subtasks}</td>
            <td>${fmt.time(t.latest_ack_timestamp)}</td>
            <td class="num">${fmt.duration(t.end_to_end_duration)}</td>
            <td class="num"><${Size} entry=${t} /></td>
            <td class="num">${fmt.bytes(t.processed_data)}</td>
            <td class="num">${fmt.bytes(t.persisted_data)}</td></tr>
          ${open === vid ? html`<tr class="nested"><td colspan="7">
            <${SubtaskRows} jobId=${jobId} checkpointId=${checkpoint.id} vertexId=${vid} /></td></tr>` : ""}`)}
        </tbody>
      </table>
    </div>`;
}

function Config({ config }) {
  if (!config) return html`<div class="muted">Checkpointing is off for this job.</div>`;
  const rows = [
    ["Mode", config.mode], ["Interval", fmt.duration(config.interval)],
    ["Timeout", fmt.duration(config.timeout)], ["Minimum pause", fmt.duration(config.min_pause)],
    ["Max concurrent", config.max_concurrent],
    ["Unaligned", config.unaligned_checkpoints ? "enabled" : "disabled"],
    ["Aligned timeout", config.aligned_checkpoint_timeout !== undefined ? fmt.duration(config.aligned_checkpoint_timeout) : undefined],
    ["Tolerable failures", config.tolerable_failed_checkpoints],
    ["Externalized", config.externalization && (config.externalization.enabled
      ? (config.externalization.delete_on_cancellation ? "delete on cancel" : "retain on cancel") : "no")],
    ["State backend", config.state_backend], ["Storage", config.checkpoint_storage],
  ].filter(([, v]) => v !== undefined && v !== null && v !== "");
  return html`<dl class="kv">${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${String(v)}</dd>`)}</dl>`;
}

export function CheckpointsTab({ jobId, job, tick, openId, onOpen }) {
  const { data, error } = useApi(`jobs/${jobId}/checkpoints`, tick);
  const config = useApi(`jobs/${jobId}/checkpoints/config`, 0);
  if (error) return html`<${ErrorNotice} error=${error} />`;
  if (!data) return html`<div class="muted">Loading checkpoints…</div>`;
  const names = {};
  for (const v of job.vertices || []) names[v.id] = v.name;
  const c = data.counts;
  const completed = data.history.filter((h) => h.status === "COMPLETED").slice().reverse();
  const chartData = [completed.map((h) => h.id), completed.map((h) => h.end_to_end_duration),
                     completed.map((h) => h.checkpointed_size), completed.map((h) => h.persisted_data)];
  const latest = data.latest.completed;
  return html`
    <div class="cards">
      <div class="card"><div class="label">Completed</div><div class="value" data-count="completed">${c.completed}</div></div>
      <div class="card"><div class="label">In progress</div><div class="value">${c.in_progress}</div></div>
      <div class="card"><div class="label">Failed</div><div class="value">${c.failed}</div></div>
      <div class="card"><div class="label">Restored</div><div class="value">${c.restored}</div></div>
      <div class="card"><div class="label">Latest completed</div><div class="value">${latest ? html`#${latest.id} <small>${fmt.ago(latest.latest_ack_timestamp)}</small>` : "–"}</div></div>
      <div class="card"><div class="label">Median duration</div><div class="value">${fmt.duration(data.summary.end_to_end_duration.p50)}</div></div>
    </div>
    <div class="grid2">
      <div class="panel"><h3 style="margin-top:0">Duration and size</h3>
        ${completed.length < 2 ? html`<div class="empty">The chart needs two completed checkpoints.</div>` : html`
        <${Chart} data=${chartData} xLabel="checkpoint"
          series=${[{ label: "duration", stroke: "#1f5f99", scale: "ms", value: fmt.duration },
                    { label: "checkpointed", stroke: "#c0392b", scale: "B", value: fmt.bytes },
                    { label: "persisted in-flight", stroke: "#6b4fa0", scale: "B", value: fmt.bytes }]}
          axes=${[{ scale: "ms", values: fmt.duration }, { scale: "B", values: fmt.bytes }]} />`}
      </div>
      <div class="panel"><h3 style="margin-top:0">Configuration</h3><${Config} config=${config.data} /></div>
    </div>
    ${data.latest.restored ? html`<div class="notice info">Restored from checkpoint #${data.latest.restored.id}
      ${fmt.ago(data.latest.restored.restore_timestamp)}${data.latest.restored.duration !== undefined
        ? ` in ${fmt.duration(data.latest.restored.duration)}, ${fmt.bytes(data.latest.restored["local-bytes"])} read locally, ${fmt.bytes(data.latest.restored["remote-bytes"])} downloaded` : ""}.</div>` : ""}
    <h2>History</h2>
    ${data.history.length === 0 ? html`<div class="empty">No checkpoint yet.</div>` : html`
    <div class="table-wrap"><table class="checkpoints">
      <thead><tr><th>ID</th><th>Status</th><th>Type</th><th>Triggered</th><th class="num">Acknowledged</th>
        <th class="num">End to end</th><th class="num">Alignment</th><th class="num">Checkpointed size</th>
        <th class="num">Persisted in-flight</th><th>Failure</th></tr></thead>
      <tbody>${data.history.map((h) => html`
        <tr class=${`clickable checkpoint${openId === h.id ? " open" : ""}`} data-checkpoint-id=${h.id}
            data-status=${h.status} data-type=${h.checkpoint_type}
            onClick=${() => onOpen(openId === h.id ? null : h.id)}>
          <td>${openId === h.id ? "▾" : "▸"} ${h.id}</td>
          <td><span class=${`badge ${h.status}`}>${h.status.toLowerCase().replace("_", " ")}</span></td>
          <td>${kind(h)}</td>
          <td title=${new Date(h.trigger_timestamp).toISOString()}>${fmt.time(h.trigger_timestamp)} <span class="muted small">${fmt.ago(h.trigger_timestamp)}</span></td>
          <td class="num">${h.num_acknowledged_subtasks}/${h.num_subtasks}</td>
          <td class="num">${fmt.duration(h.end_to_end_duration)}</td>
          <td class="num">${fmt.duration(h["alignment-duration"])}</td>
          <td class="num"><${Size} entry=${h} /></td>
          <td class="num">${fmt.bytes(h.persisted_data)}</td>
          <td class="wrap small">${h.failure_message || ""}</td></tr>
        ${openId === h.id ? html`<tr class="nested"><td colspan="10">
          <${CheckpointDetail} jobId=${jobId} checkpoint=${h} names=${names} tick=${tick} /></td></tr>` : ""}`)}
      </tbody></table></div>`}`;
}
