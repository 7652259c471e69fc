"""Links resolved once every source of a trace is read: pairs and flows, in SQL.

- B/E and async b/e pairs become slices (a stack walk per thread/id, in time order).
- Correlation ids link device work to the runtime or driver call that issued it, for
  every kernel and copy, whether or not the file has a flow event for it
  (cpu -> device: launch; cpu -> driver: submit; driver -> EU: exec; driver -> PCIe: dma).
- Flow events s/t/f bind to the slice that encloses them (or the next one for an
  f without "bp": "e") and link consecutive steps; Kineto's correlation categories
  only add what correlation did not already link; fwdbwd becomes a dependency.
- v2 flows (bind_id + flow_out/flow_in on slices) link an out to the next in.
- External ids link an operator to the runtime calls made inside it (kind other).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

CORRELATION_CATEGORIES = ("ac2g", "async_cpu_to_gpu", "async", "async_gpu", "launch")
DEPENDENCY_CATEGORIES = ("fwdbwd",)
_RANGE_JOIN_LIMIT = 200_000
_BATCH = 200_000


def _lane_kind(src_lane: str, dst_lane: str) -> str:
    return f"""CASE WHEN {src_lane} = 'cpu' AND {dst_lane} = 'driver' THEN 'submit'
                    WHEN {src_lane} = 'driver' AND {dst_lane} = 'pcie' THEN 'dma'
                    WHEN {src_lane} = 'driver' AND {dst_lane} = 'eu' THEN 'exec'
                    WHEN {src_lane} = 'cpu' AND {dst_lane} IN ('eu', 'pcie') THEN 'launch'
                    ELSE 'other' END"""


def write_track_tables(state) -> None:
    con = state.builder.con
    ids = list(state.tracks)
    con.register("_t", pa.table({
        "track_id": pa.array(ids, pa.int32()),
        "src": pa.array([state.tracks[i].src for i in ids], pa.int32()),
        "lane": pa.array([state.tracks[i].lane for i in ids], pa.string()),
    }))
    tt = sorted(state.track_threads)
    con.register("_tt", pa.table({"track_id": pa.array([a for a, _ in tt], pa.int32()),
                                  "thread_key": pa.array([b for _, b in tt], pa.int64())}))
    con.execute("CREATE TEMP TABLE _chrome_tracks AS SELECT * FROM _t")
    con.execute("CREATE TEMP TABLE _chrome_track_threads AS SELECT * FROM _tt")
    con.unregister("_t")
    con.unregister("_tt")
    state.staged.update({"tracks", "track_threads"})


def pair_begin_end(state) -> None:
    """B/E events -> slices: an E closes the latest open B of its thread."""
    if "be" not in state.staged:
        return
    con = state.builder.con
    out = _SliceBuffer(state)
    stacks: dict[int, list] = {}
    unmatched_e: dict[int, list] = {}
    mismatched: dict[int, list] = {}
    reader = con.sql(
        "SELECT src, thread_key, track_id, ts, seq, ph, name, cat, args FROM _chrome_be ORDER BY src, thread_key, ts, seq"
    ).to_arrow_reader(_BATCH)
    for batch in reader:
        cols = batch.to_pydict()
        for src, thr, track, ts, seq, ph, name, cat, args in zip(*cols.values()):
            stack = stacks.setdefault(thr, [])
            if ph == "B":
                stack.append((track, ts, seq, name, cat, args, src))
                continue
            if not stack:
                _tally(unmatched_e, src, seq)
                continue
            b_track, b_ts, _, b_name, b_cat, b_args, _ = stack.pop()
            if name and b_name and name != b_name:
                _tally(mismatched, src, seq)
            out.add(b_track, b_ts, ts - b_ts, b_name or name or "", b_cat or cat, _merge_args(b_args, args))
    out.flush()
    open_b: dict[int, list] = {}
    for stack in stacks.values():
        for track, ts, seq, *_rest, src in stack:
            _tally(open_b, src, seq)
    _report(state, unmatched_e, "E events without an open B on their thread were skipped", True)
    _report(state, open_b, "B events never closed by an E were skipped", True)
    _report(state, mismatched, "E events closed a B of another name (kept, paired by nesting)", False)


def pair_async(state) -> None:
    """Async b/e (and legacy S/F) -> slices on one track per process and category; n -> instants."""
    if "async" not in state.staged:
        return
    con = state.builder.con
    out = _SliceBuffer(state)
    stacks: dict[tuple, list] = {}
    unmatched: dict[int, list] = {}
    reader = con.sql(
        "SELECT src, pid, cat, aid, name, ph, ts, seq, args FROM _chrome_async ORDER BY src, pid, cat, aid, ts, seq"
    ).to_arrow_reader(_BATCH)
    for batch in reader:
        cols = batch.to_pydict()
        for src, pid, cat, aid, name, ph, ts, seq, args in zip(*cols.values()):
            track = state.async_track(state.sources[src], pid, cat)
            key = (src, pid, cat, aid)
            if ph == "n":
                out.add(track, ts, 0, name, cat or None, args)
                continue
            stack = stacks.setdefault(key, [])
            if ph == "b":
                stack.append((ts, name, args, seq))
                continue
            at = next((k for k in range(len(stack) - 1, -1, -1) if not name or stack[k][1] == name), None)
            if at is None:
                _tally(unmatched, src, seq)
                continue
            b_ts, b_name, b_args, _ = stack.pop(at)
            out.add(track, b_ts, max(0, ts - b_ts), b_name or name, cat or None, _merge_args(b_args, args))
    out.flush()
    for (src, *_), stack in stacks.items():
        for _ts, _n, _a, seq in stack:
            _tally(unmatched, src, seq)
    _report(state, unmatched, "async begin/end events without their other half were skipped", True)


def correlation_flows(state) -> int:
    """Flows by correlation id within each source; the (src, corr_id) pairs they link, both ends
    found, are kept as _chrome_corr_linked (the flow events that only repeat them are left out)."""
    con = state.builder.con
    corr = con.sql("""
        WITH s AS (
            SELECT s.slice_id, s.ts, s.corr_id, t.src, t.lane
            FROM _slices_staging s JOIN _chrome_tracks t USING (track_id) WHERE s.corr_id IS NOT NULL),
        cpu AS (SELECT src, corr_id, arg_min(slice_id, ts) AS sid FROM s WHERE lane = 'cpu' GROUP BY ALL),
        drv AS (SELECT src, corr_id, arg_min(slice_id, ts) AS sid FROM s WHERE lane = 'driver' GROUP BY ALL),
        dev AS (SELECT src, corr_id, slice_id, lane FROM s WHERE lane IN ('eu', 'pcie'))
        SELECT c.sid AS src_slice, d.sid AS dst_slice, 'submit' AS kind, 'correlation' AS raw_kind, src, corr_id
        FROM cpu c JOIN drv d USING (src, corr_id)
        UNION ALL
        SELECT coalesce(d.sid, c.sid), v.slice_id,
               CASE WHEN d.sid IS NULL THEN 'launch' WHEN v.lane = 'pcie' THEN 'dma' ELSE 'exec' END,
               'correlation', src, corr_id
        FROM dev v LEFT JOIN drv d USING (src, corr_id) LEFT JOIN cpu c USING (src, corr_id)
        ORDER BY src_slice, dst_slice, kind  -- the flows' ids alike in every ingest (the joins' order is their threads')
    """).to_arrow_table()  # as Arrow, not a temp table: DuckDB materialises those more slowly
    state.builder.add_flows(corr["src_slice"], corr["dst_slice"], corr["kind"], corr["raw_kind"])
    if "flow_raw" in state.staged:
        con.register("_chrome_corr", corr)
        try:
            con.execute("CREATE TEMP TABLE _chrome_corr_linked AS"
                        " SELECT DISTINCT src, corr_id FROM _chrome_corr WHERE src_slice IS NOT NULL")
        finally:
            con.unregister("_chrome_corr")
        state.staged.add("corr_linked")
    return corr.num_rows


def _flow_events(state) -> int:
    """_chrome_flow_ev: the staged flow events with their category and name, less the redundant ones; their number.

    Kineto's ac2g-style flow events whose id is a correlation id already linked both ways add
    nothing (they are most of a Kineto trace's flow events): they are left out before binding.
    """
    con = state.builder.con
    keys = list(state.flow_keys.items())
    con.register("_fk", pa.table({"key": pa.array([v for _, v in keys], pa.int32()),
                                  "cat": pa.array([c for (c, _), _ in keys], pa.string()),
                                  "name": pa.array([n for (_, n), _ in keys], pa.string())}))
    corr = ", ".join(f"'{c}'" for c in CORRELATION_CATEGORIES)
    ((n,),) = con.execute(f"""
        CREATE TEMP TABLE _chrome_flow_ev AS
        SELECT r.src, r.thread_key, r.ts, ['s', 't', 'f'][r.ph + 1] AS ph, CASE WHEN r.bp_e THEN 'e' END AS bp,
               k.cat, k.name, coalesce(CAST(r.fid AS VARCHAR), r.fid_text) AS fid, r.seq
        FROM _chrome_flow_raw r JOIN _fk k USING (key)
        WHERE NOT (lower(k.cat) IN ({corr}) AND r.fid IS NOT NULL
                   AND EXISTS (SELECT 1 FROM _chrome_corr_linked l WHERE l.src = r.src AND l.corr_id = r.fid))
    """).fetchall()
    con.unregister("_fk")
    state.staged.add("flow_ev")
    return n


def _bind_flow_events(con) -> None:
    """_chrome_flow_bound(src, seq, slice_id): the slice each flow event attaches to."""
    con.execute("""
        CREATE TEMP TABLE _chrome_flow_bound AS
        SELECT f.src, f.seq, arg_min(s.slice_id, s.dur) AS slice_id
        FROM _chrome_flow_ev f
        JOIN _chrome_track_threads tt ON tt.thread_key = f.thread_key
        JOIN _slices_staging s ON s.track_id = tt.track_id AND s.ts = f.ts
        GROUP BY f.src, f.seq
    """)
    con.execute("""
        CREATE TEMP TABLE _pending AS
        SELECT f.src, f.seq, f.thread_key, f.ts, (f.ph = 'f' AND coalesce(f.bp, '') <> 'e') AS next_slice
        FROM _chrome_flow_ev f ANTI JOIN _chrome_flow_bound b USING (src, seq)
    """)
    ((pending,),) = con.execute("SELECT count(*) FROM _pending").fetchall()
    if pending:
        con.execute("""
            CREATE TEMP TABLE _thr_slices AS
            SELECT tt.thread_key, s.slice_id, s.ts, s.dur FROM _slices_staging s
            JOIN _chrome_track_threads tt USING (track_id)
            WHERE tt.thread_key IN (SELECT DISTINCT thread_key FROM _pending)
        """)
        # the latest slice starting at or before the event, when it still encloses it
        con.execute("""
            INSERT INTO _chrome_flow_bound
            SELECT p.src, p.seq, s.slice_id FROM _pending p
            ASOF JOIN _thr_slices s ON p.thread_key = s.thread_key AND p.ts >= s.ts
            WHERE NOT p.next_slice AND s.ts + s.dur >= p.ts
        """)
        # "next slice" binding: the first slice starting at or after the event
        con.execute("""
            INSERT INTO _chrome_flow_bound
            SELECT p.src, p.seq, s.slice_id FROM _pending p
            ASOF JOIN _thr_slices s ON p.thread_key = s.thread_key AND p.ts <= s.ts
            WHERE p.next_slice
        """)
        left = con.execute(
            "SELECT count(*) FROM _pending p ANTI JOIN _chrome_flow_bound b USING (src, seq) WHERE NOT p.next_slice"
        ).fetchall()[0][0]
        if 0 < left <= _RANGE_JOIN_LIMIT:
            # inside an outer slice whose later child already ended: the deepest enclosing one
            con.execute("""
                INSERT INTO _chrome_flow_bound
                SELECT p.src, p.seq, arg_max(s.slice_id, s.ts) FROM
                    (SELECT * FROM _pending p ANTI JOIN _chrome_flow_bound b USING (src, seq)
                     WHERE NOT p.next_slice) p
                JOIN _thr_slices s ON s.thread_key = p.thread_key AND s.ts <= p.ts AND s.ts + s.dur >= p.ts
                GROUP BY p.src, p.seq
            """)
        con.execute("DROP TABLE _thr_slices")
    con.execute("DROP TABLE _pending")


def flow_event_flows(state) -> None:
    if "flow_raw" not in state.staged:
        return
    con = state.builder.con
    if not _flow_events(state):  # none left to link (Kineto's ac2g events all repeat linked correlation ids)
        return
    _bind_flow_events(con)
    state.staged.add("flow_bound")
    corr = ", ".join(f"'{c}'" for c in CORRELATION_CATEGORIES)
    dep = ", ".join(f"'{c}'" for c in DEPENDENCY_CATEGORIES)
    # A correlation category's events make edges only after an 's' or 't' of their own id (the second
    # branch below is for other categories): ids with neither (A100's 28 k 'f' of ac2g, their starts not
    # in the file) are left out of the windows whole, so every id kept has all its events. 17 -> 4 ms.
    con.execute(f"""
        CREATE TEMP TABLE _edges AS
        WITH starts AS (SELECT DISTINCT src, cat, name, fid FROM _chrome_flow_ev WHERE ph IN ('s', 't')),
        b AS (
            SELECT f.*, fb.slice_id, CASE WHEN lower(f.cat) IN ({corr}) THEN 1 ELSE 0 END AS is_corr
            FROM _chrome_flow_ev f LEFT JOIN _chrome_flow_bound fb USING (src, seq)
            WHERE NOT coalesce(lower(f.cat) IN ({corr}), false) OR EXISTS (
                SELECT 1 FROM starts s WHERE s.src = f.src AND s.cat IS NOT DISTINCT FROM f.cat
                AND s.name IS NOT DISTINCT FROM f.name AND s.fid IS NOT DISTINCT FROM f.fid)),
        ch AS (
            SELECT *, sum(CASE WHEN ph = 's' THEN 1 ELSE 0 END) OVER (
                PARTITION BY src, cat, name, fid ORDER BY ts, seq ROWS UNBOUNDED PRECEDING) AS chain
            FROM b),
        e AS (
            SELECT *, lead(slice_id) OVER w AS next_slice, lead(ph) OVER w AS next_ph,
                   count(*) OVER (PARTITION BY src, cat, name, fid, chain) AS chain_len
            FROM ch WINDOW w AS (PARTITION BY src, cat, name, fid, chain ORDER BY ts, seq))
        SELECT slice_id AS a, next_slice AS b, cat, lower(cat) IN ({dep}) AS dep, is_corr
        FROM e WHERE ph IN ('s', 't') AND next_ph IS NOT NULL AND (slice_id IS NOT NULL OR next_slice IS NOT NULL)
        UNION ALL
        SELECT CASE WHEN ph = 'f' THEN NULL ELSE slice_id END, CASE WHEN ph = 'f' THEN slice_id END,
               cat, lower(cat) IN ({dep}), is_corr
        FROM e WHERE chain_len = 1 AND is_corr = 0 AND slice_id IS NOT NULL
    """)
    state.builder.add_flows_sql(f"""
        SELECT e.a AS src_slice, e.b AS dst_slice,
               CASE WHEN e.dep THEN 'dependency' WHEN e.is_corr = 1 THEN {_lane_kind('ta.lane', 'tb.lane')}
                    ELSE 'other' END AS kind,
               coalesce(nullif(e.cat, ''), 'flow') AS raw_kind
        FROM _edges e
        LEFT JOIN _slices_staging sa ON sa.slice_id = e.a LEFT JOIN _chrome_tracks ta ON ta.track_id = sa.track_id
        LEFT JOIN _slices_staging sb ON sb.slice_id = e.b LEFT JOIN _chrome_tracks tb ON tb.track_id = sb.track_id
        WHERE NOT (e.is_corr = 1 AND (e.a IS NULL OR e.b IS NULL OR EXISTS (
            SELECT 1 FROM flows f WHERE f.src_slice = e.a AND f.dst_slice = e.b)))
    """)
    unbound = con.execute(
        "SELECT f.src, count(*), min(f.seq) FROM _chrome_flow_ev f ANTI JOIN _chrome_flow_bound b USING (src, seq)"
        " GROUP BY f.src").fetchall()
    for src, n, seq in unbound:
        state.sources[src].note("flow events match no slice on their thread at their time (not linked)",
                                int(seq), count=int(n))
    con.execute("DROP TABLE _edges")


def v2_flows(state) -> None:
    if "flow_v2" not in state.staged:
        return
    state.builder.add_flows_sql("""
        WITH r AS (
            SELECT src, bind_id, slice_id, ts, 0 AS o FROM _chrome_flow_v2 WHERE flow_in
            UNION ALL SELECT src, bind_id, slice_id, ts, 1 FROM _chrome_flow_v2 WHERE flow_out),
        e AS (SELECT *, lead(slice_id) OVER w AS nxt, lead(o) OVER w AS nxt_o
              FROM r WINDOW w AS (PARTITION BY src, bind_id ORDER BY ts, o, slice_id))
        SELECT slice_id AS src_slice, nxt AS dst_slice, 'other' AS kind, 'flow_v2' AS raw_kind
        FROM e WHERE o = 1 AND nxt_o = 0
    """)


def external_id_flows(state) -> None:
    if "ext" not in state.staged:
        return
    # the latest op with the same External id that started at or before the call (one sort, no join: the
    # rows carry their times and roles, events._stage_external_ids)
    state.builder.add_flows_sql("""
        WITH w AS (
            SELECT slice_id, is_call,
                   last_value(CASE WHEN is_call = 0 THEN slice_id END IGNORE NULLS) OVER (
                       PARTITION BY src, ext_id ORDER BY ts, is_call, slice_id ROWS UNBOUNDED PRECEDING) AS op
            FROM _chrome_ext)
        SELECT op AS src_slice, slice_id AS dst_slice, 'other' AS kind, 'external_id' AS raw_kind
        FROM w WHERE is_call = 1 AND op IS NOT NULL
    """)


class _SliceBuffer:
    def __init__(self, state):
        self.state = state
        self.rows: list[tuple] = []

    def add(self, track, ts, dur, name, cat, args) -> None:
        self.rows.append((track, ts, dur, name, cat, args))
        if len(self.rows) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        track, ts, dur, name, cat, args = zip(*self.rows)
        self.state.builder.add_slices({
            "track_id": np.array(track, dtype=np.int32), "ts": np.array(ts, dtype=np.int64),
            "dur": np.array(dur, dtype=np.int64), "name": list(name), "category": list(cat), "args": list(args),
        })
        self.rows = []


def _merge_args(a: str | None, b: str | None) -> str | None:
    """B args updated by E args (both JSON objects); either alone is kept verbatim."""
    if not b:
        return a
    if not a:
        return b
    try:
        da, db = json.loads(a), json.loads(b)
    except ValueError:
        return a
    if isinstance(da, dict) and isinstance(db, dict):
        da.update(db)
        return json.dumps(da)
    return a


def _tally(d: dict, src: int, seq: int) -> None:
    e = d.setdefault(src, [0, seq])
    e[0] += 1
    e[1] = min(e[1], seq)


def _report(state, d: dict, message: str, dropped: bool) -> None:
    for src, (n, seq) in d.items():
        state.sources[src].note(message, seq, dropped=dropped, count=n)
        state.sources[src].flush(state.builder)
