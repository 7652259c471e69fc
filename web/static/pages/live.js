// The live page (/live): the newest 5 s of a live source as they arrive over /api/live/ws (docs/tracing.md,
// "Live view"), drawn with the timeline's own pieces: its theme and time axis, the slice renderer (nesting,
// stable colours per name, labels where they fit) and the counter renderer.
//
// Names from the trace reach the page only through canvas fillText and textContent, never as markup.

import { THEME } from "../timeline/frame.js";
import { drawAxis, drawGrid } from "../timeline/axis.js";
import { NAMES_PX, AXIS_PX, COUNTER_PX, sliceAreaHeight } from "../timeline/layout.js";
import { drawSliceTrack } from "../tracks/slices.js";
import { drawCounterTrack, drawCounterLabels } from "../tracks/counters.js";
import { LANES, LANE_ACCENT, fmtCount } from "../lib/util.js";

const WINDOW_NS = 5e9;          // what is shown: the last 5 s before the newest event
const KEEP_NS = WINDOW_NS * 1.2; // what is held: a little more, so a slice reaching into the window stays
const MAX_PER_TRACK = 50000;    // events held per track (the newest win)
const MAX_OPEN = 1000;          // begins still waiting for their end, per track

/** One track of the live view: its slices (begin/end paired into slices), instants and counter samples. */
class LiveTrack {
  constructor(lane, name, order) {
    this.lane = lane;
    this.name = name;
    this.order = order;
    this.slices = [];   // {ts, dur, name}
    this.instants = []; // {ts, name}
    this.samples = [];  // {ts, value}
    this.open = [];     // begins without their end yet
    this.built = null;
    this.max_depth = 0;
  }

  add(e) {
    if (e.kind === "counter") this.samples.push({ ts: e.ts, value: e.value });
    else if (e.kind === "instant") this.instants.push({ ts: e.ts, name: e.name });
    else if (e.kind === "begin") { if (this.open.length < MAX_OPEN) this.open.push({ ts: e.ts, name: e.name }); }
    else if (e.kind === "end") {
      const b = this.open.pop();   // an end closes the newest open begin of its track
      if (b) this.slices.push({ ts: b.ts, dur: Math.max(0, e.ts - b.ts), name: b.name });
      else this.instants.push({ ts: e.ts, name: e.name });
    } else this.slices.push({ ts: e.ts, dur: e.dur, name: e.name });
    this.built = null;
  }

  /** Forget what ended before `cutoff` (a counter keeps its last sample before it: its level then). */
  prune(cutoff) {
    const bySt = (a, b) => a.ts - b.ts;
    this.slices = this.slices.filter((s) => s.ts + s.dur >= cutoff).sort(bySt).slice(-MAX_PER_TRACK);
    this.instants = this.instants.filter((s) => s.ts >= cutoff).sort(bySt).slice(-MAX_PER_TRACK);
    const samples = this.samples.sort(bySt);
    let first = 0;
    while (first + 1 < samples.length && samples[first + 1].ts < cutoff) first++;
    this.samples = samples.slice(Math.max(first, samples.length - MAX_PER_TRACK));
    this.built = null;
  }

  get held() { return this.slices.length + this.instants.length + this.samples.length + this.open.length; }

  height() { return this.lane === "counter" ? COUNTER_PX : sliceAreaHeight(this); }

  /** The track as the slice renderer reads a tile's part: sorted columns, nesting depth per slice. */
  sliceTile(newest) {
    if (this.built && !this.open.length) return this.built;
    const all = this.slices.concat(this.open.map((b) => ({ ts: b.ts, dur: Math.max(0, newest - b.ts), name: b.name })));
    all.sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    const names = [], index = new Map();
    const nameIdx = (s) => { let i = index.get(s); if (i === undefined) { i = names.length; names.push(s); index.set(s, i); } return i; };
    const n = all.length;
    const tt = { n, ts: new Float64Array(n), dur: new Float64Array(n), depth: new Uint16Array(n), name: new Uint32Array(n),
                 id: new Uint32Array(n), runs: [], maxDur: 0, in_n: this.instants.length };
    const ends = []; // ends of the slices enclosing the current one
    let deepest = 0;
    for (let i = 0; i < n; i++) {
      const s = all[i];
      while (ends.length && ends[ends.length - 1] <= s.ts) ends.pop();
      tt.ts[i] = s.ts; tt.dur[i] = s.dur; tt.depth[i] = ends.length; tt.name[i] = nameIdx(s.name); tt.id[i] = i;
      if (ends.length > deepest) deepest = ends.length;
      if (s.dur > tt.maxDur) tt.maxDur = s.dur;
      ends.push(s.ts + s.dur);
    }
    tt.in_ts = new Float64Array(this.instants.map((s) => s.ts));
    tt.in_depth = new Uint16Array(tt.in_n);
    tt.in_name = new Uint32Array(this.instants.map((s) => nameIdx(s.name)));
    this.max_depth = deepest;
    this.built = { tile: { names, start_ns: 0, bucket_ns: 1 }, tt, c0: -Infinity, c1: Infinity };
    return this.built;
  }

  /** The samples as the counter renderer reads a tile's part: one bucket per `bucket_ns`, aligned to 0. */
  counterTile(bucket_ns) {
    const c = { cn: 0, c_bucket: [], c_min: [], c_max: [], c_first: [], c_last: [] };
    for (const { ts, value } of this.samples) {
      const b = Math.floor(ts / bucket_ns), i = c.cn - 1;
      if (i >= 0 && c.c_bucket[i] === b) {
        c.c_min[i] = Math.min(c.c_min[i], value); c.c_max[i] = Math.max(c.c_max[i], value); c.c_last[i] = value;
      } else {
        c.c_bucket.push(b); c.c_min.push(value); c.c_max.push(value); c.c_first.push(value); c.c_last.push(value);
        c.cn++;
      }
    }
    return { tile: { start_ns: 0, bucket_ns }, tt: c, c0: -Infinity, c1: Infinity };
  }

  /** How many of its events reach into [t0, t1]. */
  visible(t0, t1) {
    const inside = (ts, end) => end >= t0 && ts <= t1;
    let n = 0;
    for (const s of this.slices) if (inside(s.ts, s.ts + s.dur)) n++;
    for (const s of this.open) if (s.ts <= t1) n++;
    for (const s of this.instants) if (inside(s.ts, s.ts)) n++;
    for (const s of this.samples) if (inside(s.ts, s.ts)) n++;
    return n;
  }
}

/** What the websocket has said so far: tracks by lane and name, the newest time, the counts. */
export class LiveModel {
  constructor() {
    this.tracks = new Map();
    this.newest = 0;
    this.received = 0;
    this.skipped = 0;
    this.finished = false;
  }

  add(msg) {
    for (const e of msg.events || []) {
      const key = e.lane + "\u0000" + e.track;
      let t = this.tracks.get(key);
      if (!t) this.tracks.set(key, (t = new LiveTrack(e.lane, String(e.track), this.tracks.size)));
      t.add(e);
      this.newest = Math.max(this.newest, e.ts + (e.dur || 0));
      this.received++;
    }
    this.skipped += msg.skipped || 0;
    this.finished = !!msg.finished;
    for (const t of this.tracks.values()) t.prune(this.newest - KEEP_NS);
  }

  /** How many events reach into the shown window. */
  inWindow() {
    let n = 0;
    for (const t of this.tracks.values()) n += t.visible(this.newest - WINDOW_NS, this.newest);
    return n;
  }

  /** Tracks in lane order (as the timeline orders them), then in the order they first appeared. */
  ordered() {
    const lane = (l) => { const i = LANES.indexOf(l); return i < 0 ? LANES.length : i; };
    return [...this.tracks.values()].sort((a, b) => lane(a.lane) - lane(b.lane) || a.order - b.order);
  }
}

/** The window's time <-> px mapping, shaped like the timeline's View for the renderers. */
function windowView(newest, width) {
  const start = newest - WINDOW_NS;
  return { start_ns: start, end_ns: newest, span_ns: WINDOW_NS, width_css_px: width, duration_ns: newest,
           x_of: (t) => (t - start) / WINDOW_NS * width };
}

function clipText(s, px) {
  const fit = Math.floor(px / 6.4);
  return s.length > fit ? s.slice(0, Math.max(1, fit - 1)) + "\u2026" : s;
}

/** Draw one frame; returns the height of all tracks (css px). */
export function drawLive(ctx, model, W, H, scrollTop) {
  const th = THEME, view = windowView(model.newest, Math.max(1, W - NAMES_PX));
  ctx.fillStyle = th.bg;
  ctx.fillRect(0, 0, W, H);
  const ticks = drawAxis(ctx, view, NAMES_PX, AXIS_PX, th);
  ctx.fillStyle = th.namesBg;
  ctx.fillRect(0, 0, NAMES_PX, AXIS_PX);
  ctx.fillStyle = th.mutedText;
  ctx.font = th.smallFont;
  ctx.textBaseline = "middle";
  ctx.fillText(`last ${WINDOW_NS / 1e9} s · times from the first event`, 8, AXIS_PX / 2);
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, AXIS_PX, W, H - AXIS_PX);
  ctx.clip();
  drawGrid(ctx, view, NAMES_PX, AXIS_PX, H, ticks, th);
  let y = AXIS_PX - scrollTop;
  const bucket = Math.max(1, Math.ceil(view.span_ns / view.width_css_px));
  for (const t of model.ordered()) {
    const piece = t.lane === "counter" ? t.counterTile(bucket) : t.sliceTile(model.newest);
    const h = t.height();
    if (y + h > AXIS_PX && y < H) drawTrack(ctx, t, piece, view, y, h);
    y += h;
  }
  ctx.restore();
  ctx.strokeStyle = th.border;
  ctx.beginPath();
  ctx.moveTo(NAMES_PX - 0.5, 0);
  ctx.lineTo(NAMES_PX - 0.5, H);
  ctx.stroke();
  return y + scrollTop - AXIS_PX;
}

function drawTrack(ctx, t, piece, view, y, h) {
  const th = THEME;
  ctx.fillStyle = th.namesBg;
  ctx.fillRect(0, y, NAMES_PX, h);
  ctx.fillStyle = LANE_ACCENT[t.lane] || "#888";
  ctx.fillRect(0, y, 4, h);
  ctx.fillStyle = th.mutedText;
  ctx.font = th.smallFont;
  ctx.textBaseline = "top";
  ctx.fillText(t.lane, 10, y + 5);
  ctx.fillStyle = th.text;
  ctx.font = th.font;
  ctx.fillText(clipText(t.name, NAMES_PX - 60), 52, y + 5);
  ctx.save();
  ctx.beginPath();
  ctx.rect(NAMES_PX, y, view.width_css_px, h);
  ctx.clip();
  if (t.lane === "counter") {
    const range = drawCounterTrack(ctx, [piece], view, NAMES_PX, y, h, t, th);
    drawCounterLabels(ctx, NAMES_PX, y, h, range, null, th);
  } else {
    drawSliceTrack(ctx, [piece], view, NAMES_PX, y, h, t, th);
  }
  ctx.restore();
  ctx.strokeStyle = th.border;
  ctx.beginPath();
  ctx.moveTo(0, y + h - 0.5);
  ctx.lineTo(NAMES_PX + view.width_css_px, y + h - 0.5);
  ctx.stroke();
}

function main() {
  const root = document.getElementById("timeline");
  const canvas = root.querySelector("canvas"), ctx = canvas.getContext("2d");
  const status = document.getElementById("live-status"), count = document.getElementById("live-count");
  const model = new LiveModel();
  const state = { model, frames: 0, drawn: 0, scrollTop: 0, height: 0 }; // drawn: events in the window
  window.acceltraceLive = state; // for tests and the console
  const source = Number(new URLSearchParams(location.search).get("source") || 0);
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/api/live/ws?source=${source}`);
  root.dataset.state = "connecting";
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.type === "error") { status.textContent = msg.message; root.dataset.state = "error"; return; }
    if (msg.type === "hello") { status.textContent = msg.file; root.dataset.state = "live"; return; }
    model.add(msg);
    state.drawn = model.inWindow();
    root.dataset.drawn = String(state.drawn);
    if (model.finished) root.dataset.state = "finished";
    count.textContent = `${fmtCount(model.received)} events` + (model.skipped ? ` (${fmtCount(model.skipped)} skipped)` : "")
      + (model.finished ? " \u2014 finished" : "");
  };
  ws.onclose = () => { status.textContent += " (closed)"; };
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    state.scrollTop = Math.max(0, Math.min(state.scrollTop + e.deltaY, state.height - (canvas.clientHeight - AXIS_PX)));
  }, { passive: false });
  function frame() {
    const r = root.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.floor(r.width)), H = Math.max(1, Math.floor(r.height));
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      canvas.style.width = `${W}px`; canvas.style.height = `${H}px`;
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    state.height = drawLive(ctx, model, W, H, state.scrollTop);
    state.frames++;
    requestAnimationFrame(frame);
  }
  requestAnimationFrame(frame);
}

main();
