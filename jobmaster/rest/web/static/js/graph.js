// The job graph: dagre lays the vertices out, Preact draws the SVG; each vertex is coloured
// by how its subtasks spend their time, as Flink's dashboard does (idle blue, busy a red
// scale, back-pressured dark grey to black). Pan by dragging, zoom with the wheel.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import dagre from "dagre";
import { html, useApi } from "./api.js";
import * as fmt from "./format.js";

const W = 270, H = 110;
/** The smallest initial scale: 1/1.8 of the layout's size. */
const MIN_SCALE_INVERSE = 1.8;

/**
 * A vertex's time shares (0..1) from `/jobs/:jobid`'s vertex metrics: back-pressured and
 * busy of its busiest subtask (one hot subtask is the bottleneck, as in Flink's graph), idle
 * on average; and its state, the largest.
 */
export function timeShares(vertex) {
  const m = vertex.metrics || {};
  const p = Math.max(1, vertex.parallelism || 1);
  if (m["accumulated-busy-time"] === undefined) return null;
  const share = (max, sum) => Math.min(1, (max !== undefined ? max : sum / p) / 1000);
  const backpressured = share(m["max-backpressured-time"], m["accumulated-backpressured-time"] || 0);
  const idle = Math.min(1, (m["accumulated-idle-time"] || 0) / p / 1000);
  const busy = share(m["max-busy-time"], (m["accumulated-busy-time"] || 0) * p);
  let state = "idle";
  if (backpressured >= busy && backpressured >= idle && backpressured > 0.1) state = "backpressured";
  else if (busy >= idle && busy > 0.1) state = "busy";
  return { backpressured, busy, idle, state };
}

/** The fill and text colours of a vertex (Flink's scheme). */
export function vertexColours(shares, status) {
  if (!shares || status !== "RUNNING") return { fill: "#f3f5f8", text: "#1d2733" };
  if (shares.state === "backpressured") {
    const light = Math.round(78 - 66 * shares.backpressured);   // grey to nearly black
    return { fill: `hsl(210, 8%, ${light}%)`, text: light < 55 ? "#ffffff" : "#1d2733" };
  }
  if (shares.state === "busy") {
    const light = Math.round(92 - 46 * shares.busy);            // pale to strong red
    return { fill: `hsl(2, 75%, ${light}%)`, text: light < 58 ? "#ffffff" : "#1d2733" };
  }
  const light = Math.round(94 - 12 * shares.idle);               // light blue
  return { fill: `hsl(208, 75%, ${light}%)`, text: "#1d2733" };
}

function layout(nodes) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "LR", nodesep: 28, ranksep: 80, edgesep: 12, marginx: 24, marginy: 24 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of nodes) g.setNode(n.id, { width: W, height: H });
  for (const n of nodes) {
    for (const input of n.inputs || []) {
      g.setEdge(input.id, n.id, { label: input.ship_strategy, width: 72, height: 16,
                                  labelpos: "c" }, `${input.id}-${n.id}-${input.num}`);
    }
  }
  dagre.layout(g);
  const placed = {};
  for (const id of g.nodes()) placed[id] = g.node(id);
  const edges = g.edges().map((e) => ({ key: e.name, ...g.edge(e) }));
  const { width, height } = g.graph();
  return { placed, edges, width: Math.max(width, W + 48), height: Math.max(height, H + 48) };
}

function cut(text, max) { return text.length > max ? `${text.slice(0, max - 1)}…` : text; }

function edgePath(points) {
  const [first, ...rest] = points;
  return `M${first.x},${first.y} ` + rest.map((p) => `L${p.x},${p.y}`).join(" ");
}

function Vertex({ node, vertex, box, selected, onSelect }) {
  const shares = vertex ? timeShares(vertex) : null;
  const status = vertex ? vertex.status : "CREATED";
  const { fill, text } = vertexColours(shares, status);
  const m = (vertex && vertex.metrics) || {};
  const name = (vertex && vertex.name) || node.description;
  const state = status === "RUNNING" && shares ? shares.state : status.toLowerCase();
  const x = box.x - W / 2, y = box.y - H / 2;
  return html`
    <g class=${`vertex state-${state}${selected ? " selected" : ""}`} data-vertex-id=${node.id}
       data-state=${state} transform=${`translate(${x},${y})`} style=${`color:${text}`}
       onClick=${(e) => onSelect(node.id, e)}>
      <title>${node.description}</title>
      <rect class="box" width=${W} height=${H} rx="7" fill=${fill} />
      <text class="name" x="12" y="22">${cut(name, 27)}</text>
      <text class="pill" x=${W - 10} y="21" text-anchor="end">${state.toUpperCase()}</text>
      <text x="12" y="43">Parallelism ${node.parallelism} · ${status}</text>
      <text x="12" y="62">Records in ${fmt.count(m["read-records"])} · out ${fmt.count(m["write-records"])}</text>
      <text x="12" y="81">${shares
        ? `Max back-pressured ${fmt.percent(shares.backpressured)} · busy ${fmt.percent(shares.busy)}`
        : "no time metrics yet"}</text>
      <text x="12" y="99" opacity="0.75" font-size="10.5">${shares ? `Idle ${fmt.percent(shares.idle)} on average` : ""}</text>
    </g>`;
}

/** The job's graph; `selected` is the selected vertex id, `onSelect(id)` selects one. */
export function JobGraph({ job, selected, onSelect }) {
  const planRoot = job.plan && (job.plan.plan || job.plan);
  const nodes = (planRoot && planRoot.nodes) || [];
  const shape = nodes.map((n) => `${n.id}<${(n.inputs || []).map((i) => i.id).join(",")}`).join(";");
  const graph = useMemo(() => layout(nodes), [shape]);
  const fit = { x: 0, y: 0, w: graph.width, h: graph.height };
  const [view, setView] = useState(fit);
  const [dragging, setDragging] = useState(false);
  const drag = useRef(null);
  const svg = useRef(null);
  // A large graph opens at a readable scale (its left, the sources, in view; pan or Fit
  // for the rest), a small one fitted.
  useEffect(() => {
    const width = svg.current ? svg.current.clientWidth : 0;
    setView(width ? { ...fit, w: Math.min(graph.width, width * MIN_SCALE_INVERSE) } : fit);
  }, [shape]);

  const vertices = {};
  for (const v of job.vertices || []) vertices[v.id] = v;

  const toUser = (e) => {
    const r = svg.current.getBoundingClientRect();
    const scale = Math.max(view.w / r.width, view.h / r.height);
    return { scale, x: view.x + (e.clientX - r.left) * scale, y: view.y + (e.clientY - r.top) * scale };
  };
  const onWheel = (e) => {
    e.preventDefault();
    const p = toUser(e);
    const k = e.deltaY > 0 ? 1.15 : 1 / 1.15;
    setView({ x: p.x - (p.x - view.x) * k, y: p.y - (p.y - view.y) * k, w: view.w * k, h: view.h * k });
  };
  const onDown = (e) => {
    drag.current = { x: e.clientX, y: e.clientY, view, moved: false };
    setDragging(true);
  };
  const onMove = (e) => {
    const d = drag.current;
    if (!d) return;
    const r = svg.current.getBoundingClientRect();
    const scale = Math.max(d.view.w / r.width, d.view.h / r.height);
    const dx = e.clientX - d.x, dy = e.clientY - d.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) d.moved = true;
    setView({ ...d.view, x: d.view.x - dx * scale, y: d.view.y - dy * scale });
  };
  const onUp = () => { setDragging(false); setTimeout(() => { drag.current = null; }, 0); };
  const select = (id) => { if (!(drag.current && drag.current.moved)) onSelect(id); };
  const zoom = (k) => setView({ x: view.x + view.w * (1 - k) / 2, y: view.y + view.h * (1 - k) / 2,
                                w: view.w * k, h: view.h * k });

  if (!nodes.length) return html`<div class="empty">The job has no graph yet.</div>`;
  return html`
    <div class="graph">
      <svg ref=${svg} class=${dragging ? "dragging" : ""}
           style=${`height:${Math.min(560, Math.max(220, graph.height + 40))}px`}
           viewBox=${`${view.x} ${view.y} ${view.w} ${view.h}`} preserveAspectRatio=${view.w < graph.width ? "xMinYMid meet" : "xMidYMid meet"}
           onWheel=${onWheel} onMouseDown=${onDown} onMouseMove=${onMove} onMouseUp=${onUp}
           onMouseLeave=${onUp}>
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7"
                  orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8193a8" /></marker>
        </defs>
        ${graph.edges.map((e) => html`
          <g key=${e.key}>
            <path class="edge" d=${edgePath(e.points)} marker-end="url(#arrow)" />
            <rect class="edge-label" x=${e.x - 34} y=${e.y - 9} width="68" height="15" rx="3" />
            <text class="edge-label" x=${e.x} y=${e.y + 3} text-anchor="middle">${e.label}</text>
          </g>`)}
        ${nodes.map((n) => html`<${Vertex} key=${n.id} node=${n} vertex=${vertices[n.id]}
            box=${graph.placed[n.id]} selected=${selected === n.id} onSelect=${select} />`)}
      </svg>
      <div class="tools">
        <button title="Zoom in" onClick=${() => zoom(1 / 1.3)}>+</button>
        <button title="Zoom out" onClick=${() => zoom(1.3)}>−</button>
        <button title="Fit the graph" onClick=${() => setView(fit)}>Fit</button>
      </div>
      <div class="legend">
        <span><i style="background:hsl(208,75%,88%)"></i>idle</span>
        <span><i style="background:hsl(2,75%,55%)"></i>busy</span>
        <span><i style="background:hsl(210,8%,25%)"></i>back-pressured</span>
        <span>drag to pan · wheel to zoom · click a vertex</span>
      </div>
    </div>`;
}

function Meter({ ratio, colour }) {
  return html`<span class="meter"><span style=${`width:${Math.round((ratio || 0) * 100)}%;background:${colour}`}></span></span>`;
}

/** The selected vertex's subtasks: their attempt and how long it runs, where, records,
 * time shares, back pressure. */
export function VertexPanel({ jobId, vertexId, tick }) {
  const base = `jobs/${jobId}/vertices/${vertexId}`;
  const detail = useApi(base, tick);
  const pressure = useApi(`${base}/backpressure`, tick);
  const managers = useApi("taskmanagers", tick);
  if (detail.error) return html`<div class="notice error">${detail.error.message}</div>`;
  if (!detail.data) return html`<div class="panel muted">Loading the vertex…</div>`;
  const addresses = {};
  for (const tm of (managers.data && managers.data.taskmanagers) || []) addresses[tm.id] = tm.path;
  const levels = {};
  for (const s of (pressure.data && pressure.data.subtasks) || []) levels[s.subtask] = s;
  const v = detail.data;
  return html`
    <div class="panel vertex-panel" data-vertex-id=${v.id}>
      <h2 style="margin-top:0">${v.name} <span class="muted small">parallelism ${v.parallelism}
        ${pressure.data ? html` · back pressure <span class=${`badge ${pressure.data["backpressure-level"]}`}>${pressure.data["backpressure-level"]}</span>` : ""}</span></h2>
      <div class="table-wrap"><table class="subtasks">
        <thead><tr><th class="num">#</th><th>Status</th><th class="num">Attempt</th>
          <th class="num">Duration</th><th>TaskExecutor</th><th>Host</th>
          <th class="num">Records in</th><th class="num">Records out</th>
          <th class="num">Bytes in</th><th class="num">Bytes out</th>
          <th>Busy ms/s</th><th>Back-pressured ms/s</th><th class="num">Idle ms/s</th>
          <th>Back pressure</th></tr></thead>
        <tbody>${v.subtasks.map((s) => {
          const l = levels[s.subtask];
          return html`<tr data-subtask=${s.subtask}>
            <td class="num">${s.subtask}</td>
            <td><span class=${`badge ${s.status}`}>${s.status}</span></td>
            <td class="num">${s.attempt ?? "–"}</td>
            <td class="num" title=${s["start-time"] > 0 ? `deployed ${fmt.time(s["start-time"])}` : ""}>${s.duration >= 0 ? fmt.duration(s.duration) : "–"}</td>
            <td class="mono"><a href=${`#/taskmanagers/${encodeURIComponent(s["taskmanager-id"] || "")}`}>${s["taskmanager-id"] || "–"}</a></td>
            <td class="mono">${addresses[s["taskmanager-id"]] || "–"}</td>
            <td class="num">${fmt.count(s.metrics["read-records"])}</td>
            <td class="num">${fmt.count(s.metrics["write-records"])}</td>
            <td class="num">${fmt.bytes(s.metrics["read-bytes"])}</td>
            <td class="num">${fmt.bytes(s.metrics["write-bytes"])}</td>
            <td>${l ? html`<${Meter} ratio=${l.busyRatio} colour="hsl(2,75%,55%)" />${Math.round(l.busyRatio * 1000)}` : "–"}</td>
            <td>${l ? html`<${Meter} ratio=${l.ratio} colour="hsl(210,8%,30%)" />${Math.round(l.ratio * 1000)}` : "–"}</td>
            <td class="num">${l ? Math.round(l.idleRatio * 1000) : "–"}</td>
            <td>${l ? html`<span class=${`badge ${l["backpressure-level"]}`}>${l["backpressure-level"]}</span>` : "–"}</td>
          </tr>`;
        })}</tbody>
      </table></div>
    </div>`;
}
