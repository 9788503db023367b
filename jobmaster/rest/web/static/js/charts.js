// Small uPlot time charts.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import { html } from "./api.js";

const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];

/**
 * A line chart: `data` is uPlot's [xs, ys1, ys2...]; `series` their {label, stroke, scale,
 * value}; `axes` the y axes {scale, label, values}. Redrawn in place when `data` changes.
 */
export function Chart({ data, series, axes, xLabel, height = 180, time = false }) {
  const box = useRef(null);
  const plot = useRef(null);
  const shape = series.map((s) => s.label).join("|");
  useEffect(() => {
    const width = Math.max(320, box.current.clientWidth - 8);
    const opts = {
      width, height, legend: { show: true, live: false }, cursor: { drag: { x: false, y: false } },
      scales: { x: { time } },
      series: [{ label: xLabel }, ...series.map((s) => ({
        label: s.label, stroke: s.stroke, width: 2, scale: s.scale,
        points: { show: true, size: 5 }, value: s.value && ((u, v) => (v === null ? "–" : s.value(v))),
      }))],
      // Checkpoint ids are whole numbers: no ticks between them.
      axes: [{ label: xLabel, incrs: time ? undefined : INTEGER_STEPS,
               values: time ? undefined : (u, ticks) => ticks.map((t) => String(t)) },
        ...axes.map((a, i) => ({ scale: a.scale, label: a.label, side: i === 0 ? 3 : 1,
                                 grid: { show: i === 0 }, size: 70,
                                 values: a.values && ((u, ticks) => ticks.map(a.values)) }))],
    };
    plot.current = new uPlot(opts, data, box.current);
    const resize = () => plot.current.setSize({ width: Math.max(320, box.current.clientWidth - 8), height });
    window.addEventListener("resize", resize);
    return () => { window.removeEventListener("resize", resize); plot.current.destroy(); plot.current = null; };
  }, [shape]);
  useEffect(() => { if (plot.current) plot.current.setData(data); }, [data]);
  return html`<div class="chart" ref=${box}></div>`;
}
