// Small shared helpers: formatting with units, stable colours, DOM building without innerHTML.
// Every string that came from a trace reaches the page through textContent (el() below), never markup.

export const LANES = ["cpu", "driver", "pcie", "eu", "annotation", "counter"];
export const LANE_TITLES = { cpu: "CPU", driver: "Driver", pcie: "PCIe", eu: "Execution units", annotation: "Annotations",
                             counter: "Counters" };

// Hue ranges per lane so lanes stay distinguishable while each name keeps its own stable colour.
// Annotations (ranges that mark time but are not work) are pale, low-saturation bands (tracks/slices.js).
const LANE_HUES = { cpu: [195, 255], driver: [25, 55], pcie: [95, 160], eu: [285, 345], annotation: [40, 70], counter: [170, 190] };
const LANE_PALE = { annotation: true };
export const LANE_ACCENT = { cpu: "#4a7bd0", driver: "#d08a2a", pcie: "#3aa464", eu: "#b3479e", annotation: "#a39465",
                             counter: "#2a9aa0" };

/**
 * A name as a label: without a CUDA API version suffix (`cuLaunchKernel_v7000` -> `cuLaunchKernel`) and,
 * for C++ names, without the return type, the argument list and template arguments
 * (`void at::native::k<4, F<int> >(int, F<int>)` -> `at::native::k<…>`). The full name stays in the
 * tooltip and the details.
 */
export function displayName(name) {
  let s = String(name ?? "");
  s = s.replace(/_v\d{4,5}(_ptsz|_ptds)?$/, "$1");
  // only C++ signatures: a name with a scope or template, or one ending in its argument list
  const sig = /\)( const)?$/.test(s) && /^[\w:~]/.test(s);
  if (s[0] === "<" || !(s.includes("::") || sig)) return s;
  if (/^(void|int|float|double|bool|unsigned|auto) /.test(s)) s = s.slice(s.indexOf(" ") + 1);
  let out = "", depth = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === "<" && i > 0 && /[\w>]/.test(s[i - 1]) && !/operator<*$/.test(s.slice(0, i + 1))) {
      if (depth === 0) out += "<\u2026>";
      depth++;
    } else if (c === ">" && depth > 0) {
      depth--;
    } else if (depth === 0) {
      out += c;
    }
  }
  if (sig) { // drop the argument list: the parenthesised group that ends the name
    out = out.replace(/ const$/, "");
    let d = 0;
    for (let i = out.length - 1; i >= 0; i--) {
      if (out[i] === ")") d++;
      else if (out[i] === "(" && --d === 0) { if (i > 0) out = out.slice(0, i); break; }
    }
  }
  return out.trim() || s;
}

/** FNV-1a hash of a string, as an unsigned 32-bit integer (stable across sessions). */
export function hash32(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

const colourCache = new Map();
/** Stable fill colour for a slice name on a lane; `dark` for merged (summarised) blocks. */
export function nameColour(name, lane, dark = false) {
  const key = lane + "\u0000" + name + (dark ? "\u0001" : "");
  let c = colourCache.get(key);
  if (c) return c;
  const [lo, hi] = LANE_HUES[lane] || [0, 360];
  const h = hash32(name);
  const hue = lo + (h % 1000) / 1000 * (hi - lo);
  const light = 48 + ((h >>> 10) % 16);
  if (LANE_PALE[lane]) c = dark ? hslHex(hue, 0.25, 0.62) : hslHex(hue, 0.45, (light + 32) / 100);
  else c = dark ? hslHex(hue, 0.35, (light - 22) / 100) : hslHex(hue, 0.58, light / 100);
  if (colourCache.size > 5000) colourCache.clear();
  colourCache.set(key, c);
  return c;
}

/** "#rrggbb" for an HSL colour (hex strings are the cheapest for the canvas to parse). */
export function hslHex(hue, sat, light) {
  const k = (n) => (n + hue / 30) % 12;
  const a = sat * Math.min(light, 1 - light);
  const f = (n) => light - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1));
  const hex = (v) => Math.round(v * 255).toString(16).padStart(2, "0");
  return `#${hex(f(0))}${hex(f(8))}${hex(f(4))}`;
}

/** Human duration from ns, picking ns/us/ms/s so 3-4 significant digits show. */
export function fmtDur(ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "-";
  const a = Math.abs(ns);
  if (a < 1e3) return `${trimNum(ns)} ns`;
  if (a < 1e6) return `${trimNum(ns / 1e3)} us`;
  if (a < 1e9) return `${trimNum(ns / 1e6)} ms`;
  return `${trimNum(ns / 1e9)} s`;
}

/** A time relative to the trace start: unit by magnitude, precise to about a microsecond (ns when small). */
export function fmtTime(rel_ns) {
  if (rel_ns === null || rel_ns === undefined || Number.isNaN(rel_ns)) return "-";
  const a = Math.abs(rel_ns);
  if (a < 1e3) return `${Math.round(rel_ns)} ns`;
  if (a < 1e6) return `${(rel_ns / 1e3).toFixed(3)} us`;
  if (a < 1e9) return `${(rel_ns / 1e6).toFixed(4)} ms`;
  return `${(rel_ns / 1e9).toFixed(6)} s`;
}

function trimNum(v) {
  const a = Math.abs(v);
  const digits = a >= 100 ? 1 : a >= 10 ? 2 : 3;
  return String(Number(v.toFixed(digits)));
}

export function fmtBytes(b) {
  if (b === null || b === undefined) return "-";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = Number(b);
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return `${trimNum(v)} ${units[i]}`;
}

/** Achieved bandwidth in GB/s (bytes per ns is exactly GB/s). */
export function gbps(bytes, dur_ns) {
  if (!bytes || !dur_ns) return null;
  return Number(bytes) / dur_ns;
}

/** A rate given in GB/s, shown in GB/s, MB/s or KB/s so small rates do not read as zero. */
export function fmtGbps(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1 || a === 0) return `${trimNum(v)} GB/s`;
  if (a >= 1e-3) return `${trimNum(v * 1e3)} MB/s`;
  return `${trimNum(v * 1e6)} KB/s`;
}

export function fmtCount(n) {
  return Number(n).toLocaleString("en-US");
}

/** Build an element; children may be strings (added as text nodes) or nodes. */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export function clamp(v, lo, hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/** Binary search: first index i in sorted typed array a[lo..hi) with a[i] >= v. */
export function lowerBound(a, v, lo = 0, hi = a.length) {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] < v) lo = mid + 1; else hi = mid;
  }
  return lo;
}
