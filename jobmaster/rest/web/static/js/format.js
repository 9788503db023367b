// Number, size, duration and time formatting for the dashboard's tables.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 1536 -> "1.5 KiB"; null/undefined/negative -> "–". */
export function bytes(n) {
  if (n === null || n === undefined || n < 0 || Number.isNaN(n)) return "–";
  let i = 0;
  while (n >= 1024 && i < UNITS.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)} ${UNITS[i]}`;
}

/** 850 -> "850 ms", 1234 -> "1.23 s", 200000 -> "3 min 20 s"; null/negative -> "–". */
export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0 || Number.isNaN(ms)) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** 1234567 -> "1.23 M", 12345 -> "12,345". */
export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  if (Math.abs(n) >= 1e9) return `${(n / 1e9).toFixed(2)} G`;
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  return Math.round(n).toLocaleString("en-US");
}

/** A share 0..1 as "42 %". */
export function percent(ratio) {
  if (ratio === null || ratio === undefined || Number.isNaN(ratio)) return "–";
  return `${Math.round(ratio * 100)} %`;
}

function pad(n) { return String(n).padStart(2, "0"); }

/** Epoch ms as local "HH:MM:SS", with the date when not today. */
export function time(ms) {
  if (!ms || ms < 0) return "–";
  const d = new Date(ms);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === new Date().toDateString()) return clock;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock}`;
}

/** Epoch ms relative to now: "12 s ago", "3 min ago". */
export function ago(ms, now = Date.now()) {
  if (!ms || ms < 0) return "–";
  const s = Math.max(0, (now - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 172800) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}
