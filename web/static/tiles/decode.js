// Decoder for the binary tile encoding of docs/api.md: a u32 header length, a JSON header, then
// 8-aligned little-endian typed arrays. Per track we keep zero-copy subarray views of each column; a
// column sent as `base` + narrow integers (times, ids, byte counts) is widened once, here, to a
// Float64Array of the exact values.

const TYPES = { u8: Uint8Array, u16: Uint16Array, u32: Uint32Array, i32: Int32Array, f64: Float64Array };
const EMPTY_F64 = new Float64Array(0);
const EMPTY_U32 = new Uint32Array(0);

/** Decode one tile ArrayBuffer into {level, index, start_ns, span_ns, bucket_ns, names, tracks: Map}. */
export function decodeTile(buf, level, index) {
  const dv = new DataView(buf);
  if (buf.byteLength < 4) throw new Error(`tile ${level}/${index}: ${buf.byteLength} bytes, expected a header`);
  const hlen = dv.getUint32(0, true);
  if (4 + hlen > buf.byteLength) throw new Error(`tile ${level}/${index}: header of ${hlen} bytes exceeds the tile`);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, hlen)));
  const body = Math.ceil((4 + hlen) / 8) * 8;
  const cols = {};
  const widened = []; // buffers of widened columns (the worker transfers them with the tile)
  for (const [sec, spec] of Object.entries(header.sections || {})) {
    cols[sec] = {};
    for (const [name, c] of Object.entries(spec.columns || {})) {
      const T = TYPES[c.dtype];
      if (!T) throw new Error(`tile ${level}/${index}: unknown dtype ${c.dtype} for ${sec}.${name}`);
      if (body + c.offset + c.length * T.BYTES_PER_ELEMENT > buf.byteLength) {
        throw new Error(`tile ${level}/${index}: column ${sec}.${name} runs past the tile's ${buf.byteLength} bytes`);
      }
      const raw = new T(buf, body + c.offset, c.length);
      if (c.base === undefined || c.base === null) { cols[sec][name] = raw; continue; }
      const wide = new Float64Array(c.length), base = Number(c.base);
      for (let i = 0; i < c.length; i++) wide[i] = base + raw[i];
      cols[sec][name] = wide;
      widened.push(wide.buffer);
    }
  }
  const bucket_ns = header.bucket_ns;
  const tile = {
    level: header.level, index: header.index,
    start_ns: header.t0_rel_ns, span_ns: header.t1_rel_ns - header.t0_rel_ns, bucket_ns,
    names: header.strings || [], tracks: new Map(),
    // a depth page: the depths carried exactly, and the first depth the fold sections summarise
    page: header.page ?? null, depths: header.depths ?? null, fold_from: header.fold_from ?? null,
    widened, extra_bytes: widened.reduce((a, b) => a + b.byteLength, 0),
  };
  const pick = (sec, name, range, empty) => {
    const c = cols[sec] && cols[sec][name];
    return c ? c.subarray(range[0], range[0] + range[1]) : empty;
  };
  const none = [0, 0];
  for (const [tid, r] of Object.entries(header.tracks || {})) {
    const s = r.slices || none, m = r.merged || none, i = r.instants || none, c = r.counters || none;
    const f = r.fold || none, fi = r.fold_instants || none;
    tile.tracks.set(Number(tid), {
      n: s[1],
      id: pick("slices", "id", s, EMPTY_F64), ts: pick("slices", "ts", s, EMPTY_F64),
      dur: pick("slices", "dur", s, EMPTY_F64), depth: pick("slices", "depth", s, EMPTY_U32),
      name: pick("slices", "name", s, EMPTY_U32), bytes: pick("slices", "bytes", s, null),
      mn: m[1],
      m_bucket: pick("merged", "bucket", m, EMPTY_U32), m_depth: pick("merged", "depth", m, EMPTY_U32),
      m_count: pick("merged", "count", m, EMPTY_U32), m_busy: pick("merged", "busy_ns", m, EMPTY_F64),
      m_id: pick("merged", "longest_id", m, EMPTY_F64), m_dur: pick("merged", "longest_dur", m, EMPTY_F64),
      m_name: pick("merged", "longest_name", m, EMPTY_U32), m_bytes: pick("merged", "bytes", m, null),
      in_n: i[1],
      in_bucket: pick("instants", "bucket", i, EMPTY_U32), in_depth: pick("instants", "depth", i, EMPTY_U32),
      in_count: pick("instants", "count", i, EMPTY_U32), in_id: pick("instants", "id", i, EMPTY_F64),
      in_ts: pick("instants", "ts", i, EMPTY_F64), in_name: pick("instants", "name", i, EMPTY_U32),
      cn: c[1],
      c_bucket: pick("counters", "bucket", c, EMPTY_U32), c_count: pick("counters", "count", c, EMPTY_U32),
      c_min: pick("counters", "min", c, EMPTY_F64), c_max: pick("counters", "max", c, EMPTY_F64),
      c_first: pick("counters", "first", c, EMPTY_F64), c_last: pick("counters", "last", c, EMPTY_F64),
      // fold: runs [f_start, f_end) covered by the slices of depth >= tile.fold_from; fi_ts: one tick per
      // bucket holding deeper instants
      fold_n: f[1], f_start: pick("fold", "start", f, EMPTY_F64), f_end: pick("fold", "end", f, EMPTY_F64),
      fi_n: fi[1], fi_ts: pick("fold_instants", "ts", fi, EMPTY_F64),
    });
  }
  // merged buckets as runs per depth, built here (when the tile arrives) rather than in a frame
  for (const tt of tile.tracks.values()) {
    tt.runs = mergedRuns(tt);
    // the longest exact slice bounds how far before a window a slice overlapping it can start
    let m = 0;
    for (let i = 0; i < tt.n; i++) if (tt.dur[i] > m) m = tt.dur[i];
    tt.maxDur = m;
  }
  return tile;
}

/**
 * Runs of consecutive merged buckets per depth for one track of one tile: an Int32Array
 * [bucket_start, bucket_end, ...] per depth (null where none). Dense stretches become one rect each.
 */
export function mergedRuns(tt) {
  const byDepth = [];
  const open = [];
  for (let i = 0; i < tt.mn; i++) {
    const d = tt.m_depth[i], b = tt.m_bucket[i];
    let list = byDepth[d];
    if (!list) list = byDepth[d] = [];
    if (open[d] === b && list.length) list[list.length - 1] = b + 1;
    else list.push(b, b + 1);
    open[d] = b + 1;
  }
  return Array.from(byDepth, (l) => (l ? Int32Array.from(l) : null));
}
