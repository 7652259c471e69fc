// Following a live trace: the server pushes, over /api/live/ws?trace=ID, the time range each new piece of
// data touched; this grows the timeline's duration, marks the tiles over that range stale (they are
// refetched and redrawn, every other tile stays as it is) and, while following, keeps the newest time
// at the right edge. Scrolling back stops following; End (or the Follow button) resumes. When the
// capture stops and the trace is published under the same id, `publish` turns the timeline into the
// ordinary trace's in place (the page's onfinal calls it; no reload: the URL and the view stay).
//
// Test hook (docs/ui.md): window.acceltrace.live = {trace_id, head_ns, drawn_head_ns, not_drawn}: the
// newest event time the server has told the page of and the newest one drawn, ns relative to the trace
// start (both null once the trace is final), and the spans not drawn live ([t0, t1] ns: a server behind left
// them out, or the live view let them go beyond its memory bound unsealed;
// drawn hatched over the tracks; empty once final).

import { fmtCount } from "../lib/util.js";
import { Layout, NAMES_PX, AXIS_PX } from "./layout.js";

const HEAD_MARGIN = 0.04; // share of the view kept empty right of the newest event while following
const RECONNECT_MS = 1000;
const SEQ_HEADS_KEPT = 2000;

export class LiveFollower {
  constructor(tl, api, meta, { status, button, onfinal }) {
    this.tl = tl;
    this.api = api;
    this.statusEl = status;
    this.button = button;
    this.onfinal = onfinal;
    this.following = true;
    this.headBySeq = new Map([[0, meta.live.head_ns]]);
    this.state = { trace_id: api.id, head_ns: meta.live.head_ns, drawn_head_ns: null, not_drawn: [] };
    this.gaps = new Map(); // start ns -> end ns of the spans not drawn live (a span's end may grow)
    this.addGaps(meta.live.not_drawn);
    this.layoutVersion = meta.live.layout_version;
    this.counts = { events: meta.live.events, rate_per_s: meta.live.rate_per_s, lost_events: meta.live.lost_events,
                    not_shown: meta.counts ? meta.counts.not_shown : 0,
                    dropped_live: meta.counts ? meta.counts.dropped_live || 0 : 0 };
    this.finalising = false;
    this.final = false;
    this.settingView = false;
    this.inbox = Promise.resolve();
    this.grow(meta.live.head_ns);
    this.showFollow();
    this.showStatus();
    tl.on("frame", () => this.afterFrame());
    tl.on("view", () => this.viewMoved());
    window.addEventListener("keydown", (e) => {
      if (e.key === "End" && !e.target.closest?.("input, textarea")) { e.preventDefault(); this.follow(true); }
    });
    button.addEventListener("click", () => this.follow(!this.following));
    this.connect();
  }

  connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/api/live/ws?trace=${encodeURIComponent(this.api.id)}`);
    this.ws = ws;
    // one message at a time, in order: a layout change awaits the metadata, and the pushes after it
    // must not start a second re-layout meanwhile (nor overtake it)
    ws.onmessage = (e) => { this.inbox = this.inbox.then(() => this.message(JSON.parse(e.data)))
      .catch((err) => console.warn(`live push: ${err.message}`)); };
    ws.onclose = () => { if (!this.final) setTimeout(() => this.connect(), RECONNECT_MS); };
  }

  async message(m) {
    if (m.type === "error") { this.statusEl.textContent = `live: ${m.message}`; this.final = true; return; }
    this.counts = { events: m.events, rate_per_s: m.rate_per_s, lost_events: m.lost_events, not_shown: m.not_shown,
                    dropped_live: m.dropped_live || 0 };
    this.finalising = Boolean(m.finalising);
    if (m.type === "final") {
      this.final = true;
      this.state.head_ns = null;
      this.state.drawn_head_ns = null;
      this.gaps.clear();
      this.state.not_drawn = [];
      this.showStatus(m.status === "failed" ? `capture failed: ${m.error || ""}` : "finished: opening the analysed trace…");
      if (this.onfinal) this.onfinal(m);
      return;
    }
    if (m.layout_version !== this.layoutVersion) await this.relayout(m.layout_version);
    this.headBySeq.set(m.seq, m.head_ns);
    if (this.headBySeq.size > SEQ_HEADS_KEPT) this.headBySeq.delete(this.headBySeq.keys().next().value);
    this.state.head_ns = m.head_ns;
    this.addGaps(m.not_drawn);
    this.grow(m.head_ns);
    this.tl.tiles.invalidate(m.t0_ns, m.t1_ns, m.seq);
    this.tl.requestDraw();
    this.showStatus();
  }

  /** New tracks or groups: take the server's layout and start the tile cache afresh. */
  async relayout(version) {
    const meta = await this.api.meta();
    this.layoutVersion = version;
    const tl = this.tl;
    const pinned = tl.layout.pinned;
    tl.meta = { ...tl.meta, ...meta };
    tl.layout = new Layout(meta.tracks || []);
    tl.layout.setPinned(pinned);
    tl.groupOf = new Map((meta.tracks || []).map((t) => [t.track_id, t.group ?? null]));
    tl.tiles.clear();
    tl.relayout();
  }

  /** The capture is a published trace now: its metadata (tracks, ids, levels) and tiles replace the
   *  live ones; the view stays where it is, the live controls go. */
  publish(meta) {
    const tl = this.tl;
    const pinned = tl.layout.pinned;
    tl.meta = meta;
    tl.layout = new Layout(meta.tracks || []);
    tl.layout.setPinned(pinned);
    tl.groupOf = new Map((meta.tracks || []).map((t) => [t.track_id, t.group ?? null]));
    const lv = meta.levels || {};
    tl.minLevel = lv.min ?? 0;
    tl.maxLevel = lv.max ?? 62;
    tl.view.duration_ns = Math.max(1, meta.duration_ns || 1);
    tl.tiles.clear();
    tl.relayout();
    this.button.hidden = true;
    this.statusEl.hidden = true;
  }

  /** The trace now ends at head_ns: widen the timeline and, while following, move the view along. */
  grow(head_ns) {
    const tl = this.tl;
    const d = Math.max(1, head_ns);
    tl.meta.duration_ns = d;
    tl.view.duration_ns = d;
    tl.maxLevel = Math.max(tl.maxLevel, Math.ceil(Math.log2(Math.max(2, d / 1024))));
    if (this.following) {
      const v = tl.view;
      const fresh = v.end_ns <= v.start_ns || v.span_ns >= d * 1.2;
      const span = fresh ? d : v.span_ns;
      this.settingView = true;
      v.set(d - span * (1 - HEAD_MARGIN), d + span * HEAD_MARGIN);
      this.settingView = false;
    }
  }

  viewMoved() {
    if (this.settingView || !this.following) return;
    const v = this.tl.view;
    // a pan or zoom that leaves the newest time off the right part of the screen stops following
    if (v.end_ns < this.state.head_ns - v.span_ns * 0.02) this.follow(false);
  }

  follow(on) {
    this.following = on;
    this.showFollow();
    if (on && this.state.head_ns !== null) this.grow(this.state.head_ns);
  }

  addGaps(spans) {
    if (!spans || !spans.length) return;
    for (const [lo, hi] of spans) this.gaps.set(lo, Math.max(hi, this.gaps.get(lo) ?? hi));
    this.state.not_drawn = [...this.gaps].sort((a, b) => a[0] - b[0]);
  }

  /** Hatch the spans not drawn live over the tracks area, so that no one reads them as idle time. */
  drawGaps() {
    const tl = this.tl, v = tl.view, ctx = tl.ctx;
    const w = tl.width_css_px - NAMES_PX, h = tl.height_css_px - AXIS_PX;
    if (!this.gaps.size || w <= 0 || h <= 0) return;
    if (!this.hatch) {
      const c = document.createElement("canvas");
      c.width = c.height = 8;
      const g = c.getContext("2d");
      g.strokeStyle = "rgba(120,120,120,0.55)";
      g.beginPath(); g.moveTo(0, 8); g.lineTo(8, 0); g.stroke();
      this.hatch = ctx.createPattern(c, "repeat");
    }
    ctx.save();
    ctx.setTransform(tl.dpr, 0, 0, tl.dpr, 0, 0);
    ctx.beginPath(); ctx.rect(NAMES_PX, AXIS_PX, w, h); ctx.clip();
    ctx.fillStyle = this.hatch;
    for (const [lo, hi] of this.gaps) {
      if (hi < v.start_ns || lo > v.end_ns) continue;
      const a = NAMES_PX + v.x_of(lo), b = NAMES_PX + v.x_of(hi);
      ctx.fillRect(a, AXIS_PX, Math.max(1, b - a), h);
    }
    ctx.restore();
  }

  afterFrame() {
    if (this.final) return;
    this.drawGaps();
    const seq = this.tl.tiles.completeSeq(this.tl.visibleKeys);
    if (seq < 0) return;
    const head = this.headBySeq.get(seq);
    if (head === undefined || head > this.tl.view.end_ns) return;
    if (this.state.drawn_head_ns === null || head > this.state.drawn_head_ns) this.state.drawn_head_ns = head;
  }

  showFollow() {
    this.button.hidden = false;
    this.button.setAttribute("aria-pressed", String(this.following));
    this.button.textContent = this.following ? "Following" : "Follow (End)";
  }

  showStatus(text) {
    const el = this.statusEl;
    el.hidden = false;
    el.dataset.state = this.final ? "final" : this.finalising ? "finalising" : "live";
    const c = this.counts;
    const rate = c.rate_per_s >= 1000 ? `${(c.rate_per_s / 1000).toFixed(1)} k/s` : `${Math.round(c.rate_per_s)}/s`;
    const main = text || (this.finalising ? "● finalising: ingesting and analysing…" : `● live · ${fmtCount(c.events)} events · ${rate}`);
    const lost = document.createElement("span");
    lost.className = "lost";
    lost.id = "live-lost";
    lost.textContent = c.lost_events ? `lost ${fmtCount(c.lost_events)}` : "lost 0";
    lost.title = "events the tracing daemon dropped (full rings) so far";
    const parts = [main, lost];
    if (c.not_shown) { // the server fell behind: said, never hidden (the published trace has them all)
      const behind = document.createElement("span");
      behind.className = "lost";
      behind.id = "live-behind";
      behind.textContent = `${fmtCount(c.not_shown)} not drawn live`;
      behind.title = "the server fell behind the capture and drew the newest events (the hatched spans are not drawn);"
        + " the finished trace holds every one";
      parts.push(behind);
    }
    if (c.dropped_live) { // drawn, then let go: the live view holds the newest events in memory, not all
      const gone = document.createElement("span");
      gone.className = "lost";
      gone.id = "live-dropped";
      gone.textContent = `${fmtCount(c.dropped_live)} no longer held live`;
      gone.title = "the live view keeps the newest events in memory and sealed parts on disk; older spans it"
        + " could not seal are hatched. The finished trace holds every one";
      parts.push(gone);
    }
    el.replaceChildren(...parts);
  }
}
