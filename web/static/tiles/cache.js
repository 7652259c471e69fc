// Tile cache: fetches tiles for (group, level, index), keeps an LRU of decoded tiles, never blocks drawing.
//
// A tile covers TILE_BUCKETS buckets of 2^level ns starting at index * TILE_BUCKETS * 2^level (relative ns).
// Decoded tiles have the shape produced by decode.js: {tracks: Map(track_id -> TrackTile), names: [...]}.

import { fetchTile } from "./fetch.js";

export const TILE_BUCKETS = 1024;
const MAX_TILES = 400;
const MAX_BYTES = 160e6; // tile buffers kept, whatever the trace size (the page's memory target is 300 MB)
const MAX_IN_FLIGHT = 8;

/**
 * A group's tiles come in depth pages (docs/api.md "Depth pages"): the store keys one page of a group
 * as "<group>~<page>"; a plain group key (the live page's tiles) is the unpaged tile.
 */
export function pageKey(group, page) {
  return page === null || page === undefined ? group : `${group}~${page}`;
}

function tileUrl(api, level, index, groupKey) {
  const k = groupKey ?? "";
  const at = k.indexOf("~");
  if (at < 0) return api.tileUrl(level, index, groupKey);
  return `${api.tileUrl(level, index, k.slice(0, at))}&page=${k.slice(at + 1)}`;
}

export function tileSpanNs(level) {
  return TILE_BUCKETS * Math.pow(2, level);
}

/** Tile indices at `level` overlapping [start_ns, end_ns) (clamped to the trace). */
export function tileRange(level, start_ns, end_ns, duration_ns) {
  const span = tileSpanNs(level);
  const lo = Math.max(0, Math.floor(Math.max(0, start_ns) / span));
  const hi = Math.floor(Math.max(0, Math.min(end_ns, duration_ns)) / span);
  return [lo, Math.max(lo, hi)];
}

export class TileStore {
  /** @param api an Api; @param ondata called whenever a tile arrives (to schedule a redraw) */
  constructor(api, ondata) {
    this.api = api;
    this.ondata = ondata;
    this.tiles = new Map();     // key -> decoded tile (Map keeps insertion order: LRU by re-insert)
    this.inflight = new Map();  // key -> AbortController
    this.queue = [];            // keys waiting for a fetch slot, most wanted first
    this.errors = new Map();    // key -> message (not refetched)
    this.wanted = new Set();    // keys wanted by the latest update
    this.bytes_fetched = 0;
    this.held_bytes = 0;
    this.min_level = 0;
    this.max_level = 60;
    // live traces: `seq` counts the server's pushes; a loaded tile whose time range a later push
    // changed is stale (kept and drawn until its refetch arrives)
    this.seq = 0;
    this.staleSince = new Map(); // key -> seq of the push that made it stale
  }

  /** A push (number `seq`) changed [t0_ns, t1_ns]: tiles over that range are refetched when wanted. */
  invalidate(t0_ns, t1_ns, seq) {
    this.seq = seq;
    if (t0_ns === null || t0_ns === undefined) return;
    for (const k of [...this.tiles.keys(), ...this.inflight.keys(), ...this.errors.keys()]) {
      const [, level, index] = k.split("|");
      const span = tileSpanNs(Number(level));
      const c0 = Number(index) * span;
      if (c0 > t1_ns || c0 + span < t0_ns) continue;
      if (this.errors.has(k)) this.errors.delete(k); // e.g. a group that did not exist yet: ask again
      else this.staleSince.set(k, seq);
    }
  }

  /** Forget every tile (the live layout changed: groups hold other tracks now). */
  clear() {
    for (const ctl of this.inflight.values()) ctl.abort();
    this.tiles.clear(); this.inflight.clear(); this.queue = []; this.errors.clear(); this.staleSince.clear();
    this.held_bytes = 0;
  }

  /** The newest push every one of `keys` is up to date with (-1 when one is not loaded). */
  completeSeq(keys) {
    let out = this.seq;
    for (const k of keys) {
      const t = this.tiles.get(k);
      if (!t) return -1;
      if (this.staleSince.has(k)) out = Math.min(out, t.issued_seq ?? 0);
    }
    return out;
  }

  key(group, level, index) { return `${group ?? ""}|${level}|${index}`; }

  /** The tile if loaded (touching it in the LRU), else undefined. */
  get(group, level, index) {
    const k = this.key(group, level, index);
    const t = this.tiles.get(k);
    if (t) { this.tiles.delete(k); this.tiles.set(k, t); }
    return t;
  }

  has(group, level, index) {
    const k = this.key(group, level, index);
    return this.tiles.has(k) || this.errors.has(k);
  }

  error(group, level, index) { return this.errors.get(this.key(group, level, index)); }

  /**
   * Declare the tiles wanted now, in priority order (visible first, padding after).
   * Wanted tiles not loaded are queued; queued tiles no longer wanted are dropped; in-flight ones finish.
   */
  want(specs) {
    this.wanted = new Set();
    this.queue = [];
    for (const [group, level, index] of specs) {
      const k = this.key(group, level, index);
      this.wanted.add(k);
      if (this.inflight.has(k) || this.errors.has(k) || (this.tiles.has(k) && !this.staleSince.has(k))) continue;
      this.queue.push([k, group, level, index]);
    }
    // requests for tiles nobody wants any more (a zoom moved on) would hold fetch slots: drop them
    for (const [k, ctl] of this.inflight) if (!this.wanted.has(k)) ctl.abort();
    this.pump();
  }

  pump() {
    while (this.inflight.size < MAX_IN_FLIGHT && this.queue.length) {
      const [k, group, level, index] = this.queue.shift();
      if (this.inflight.has(k) || (this.tiles.has(k) && !this.staleSince.has(k))) continue;
      const ctl = new AbortController();
      this.inflight.set(k, ctl);
      const issued = this.seq;
      fetchTile(tileUrl(this.api, level, index, group), level, index, ctl.signal)
        .then((t) => {
          if (this.inflight.get(k) !== ctl) return; // cleared meanwhile (a new live layout)
          t.issued_seq = issued;
          this.bytes_fetched += t.bytes;
          const old = this.tiles.get(k);
          if (old) { this.held_bytes -= old.bytes || 0; this.tiles.delete(k); }
          this.tiles.set(k, t);
          this.held_bytes += t.bytes;
          if ((this.staleSince.get(k) ?? -1) <= issued) this.staleSince.delete(k);
          this.evict();
        })
        .catch((e) => {
          if (e.name !== "AbortError") this.errors.set(k, String(e.message || e));
        })
        .finally(() => {
          if (this.inflight.get(k) === ctl) this.inflight.delete(k);
          this.pump();
          if (this.ondata) this.ondata();
        });
    }
  }

  /** Pending = wanted and neither loaded nor failed. */
  pendingCount(keys) {
    let n = 0;
    for (const k of keys) if (!this.tiles.has(k) && !this.errors.has(k)) n++;
    return n;
  }

  /**
   * What to draw for tiles lo..hi of `level`: [{tile, c0, c1}] where [c0, c1) is the time range the tile
   * stands in for. A missing tile is replaced by a loaded coarser one (up to 6 levels up) or the two finer
   * halves, so zooming never flashes empty; the timeline stays "loading" until the exact tiles arrive.
   */
  cover(group, level, lo, hi) {
    const out = [];
    const seen = new Set();
    const span = tileSpanNs(level);
    for (let i = lo; i <= hi; i++) {
      const c0 = i * span, c1 = c0 + span;
      const t = this.get(group, level, i);
      if (t) { out.push({ tile: t, c0, c1 }); continue; }
      let found = false;
      for (let k = 1; k <= 6 && !found; k++) {
        const up = this.get(group, level + k, Math.floor(i / Math.pow(2, k)));
        if (up) { found = true; out.push({ tile: up, c0, c1 }); }
      }
      if (found || level === 0) continue;
      for (const j of [2 * i, 2 * i + 1]) {
        const down = this.get(group, level - 1, j);
        if (down) out.push({ tile: down, c0: j * span / 2, c1: (j + 1) * span / 2 });
      }
    }
    return out;
  }

  /** Bytes of tile buffers held by the cache (outside the JS heap proper, so reported separately). */
  retainedBytes() { return this.held_bytes; }

  /** Drop least recently used tiles nobody wants now until both the count and the byte budget hold. */
  evict() {
    while (this.tiles.size > MAX_TILES || this.held_bytes > MAX_BYTES) {
      let victim = null;
      for (const k of this.tiles.keys()) { if (!this.wanted.has(k)) { victim = k; break; } }
      if (victim === null) break;
      this.held_bytes -= this.tiles.get(victim).bytes || 0;
      this.tiles.delete(victim);
      this.staleSince.delete(victim);
    }
  }
}
