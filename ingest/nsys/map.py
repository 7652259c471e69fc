"""The SQL that maps a staged Nsight export onto acceltrace's slices, counters and links.

Runs in the staging DuckDB (ingest/nsys/importer.py copied the export's tables there). Every slice
query yields the builder's slice columns plus `gpid` (Nsight's serialized process id, which
scopes correlation ids) and `role` (how the slice takes part in correlation links).
`{off}` is added to every Nsight timestamp to put it on the UTC epoch clock.
"""

from __future__ import annotations

import json

# Nsight's own enum of memory kinds (ENUM_CUDA_MEM_KIND; not CUPTI's numbering, which starts
# at 0 = unknown): used when the export does not carry the enum table (2.x exports).
MEM_KINDS_DEFAULT = {
    0: ("PAGEABLE", "Pageable"), 1: ("PINNED", "Pinned"), 2: ("DEVICE", "Device"), 3: ("ARRAY", "Array"),
    4: ("MANAGED", "Managed"), 5: ("DEVICE_STATIC", "Device Static"), 6: ("MANAGED_STATIC", "Managed Static"),
    7: ("UNKNOWN", "Unknown"),
}

# CUPTI copy kinds (ENUM_CUDA_MEMCPY_OPER): id -> (short name, direction, lane)
COPY_KINDS = {
    0: ("Unknown", None, "eu"), 1: ("HtoD", "h2d", "pcie"), 2: ("DtoH", "d2h", "pcie"),
    3: ("HtoA", "h2d", "pcie"), 4: ("AtoH", "d2h", "pcie"), 5: ("AtoA", "d2d", "eu"),
    6: ("AtoD", "d2d", "eu"), 7: ("DtoA", "d2d", "eu"), 8: ("DtoD", "d2d", "eu"),
    9: ("HtoH", None, "eu"), 10: ("PtoP", "p2p", "pcie"), 11: ("HtoD", "h2d", "pcie"),
    12: ("DtoH", "d2h", "pcie"), 13: ("DtoD", "d2d", "eu"),
}

# NVTX_EVENTS.eventType values we draw (ENUM_NSYS_EVENT_TYPE); the rest name threads, domains, categories.
NVTX_MARK = 34
NVTX_THREAD_NAME = 39
NVTX_RANGES = {59: "push/pop", 60: "start/end", 70: "push/pop", 71: "start/end"}
NVTX_DOMAIN_CREATE = 75
NVTX_METADATA = {33, 39, 75, 76}


def calls_table_sql(driver_class: int, backtrace_class: int, has_driver_table: bool) -> str:
    """API calls of RUNTIME (and DRIVER): one row per call, with its lane.

    Nsight writes CUDA runtime and driver calls into the RUNTIME table (eventClass tells them
    apart) and adds, for calls with a captured stack, a second "backtrace" row with the same
    thread and correlation id. That row is not a call: its stack id joins the call it belongs to;
    only a backtrace row whose call is missing stands in for it. `src_row` is the row's place in
    the export (RUNTIME's rows, then DRIVER's): the order calls_sql gives them in, so that every
    ingest numbers them alike.
    """
    union = (
        f" UNION ALL BY NAME SELECT 'driver' AS lane, rowid + {1 << 48} AS src_row, *"
        " FROM CUPTI_ACTIVITY_KIND_DRIVER" if has_driver_table else ""
    )
    return f"""
    CREATE TABLE _calls AS
    WITH allc AS (
        SELECT CASE WHEN eventClass = {driver_class} THEN 'driver' ELSE 'cpu' END AS lane, rowid AS src_row, *
        FROM CUPTI_ACTIVITY_KIND_RUNTIME{union}
    ),
    bt AS (SELECT * FROM allc WHERE eventClass = {backtrace_class}),
    calls AS (SELECT * FROM allc WHERE eventClass IS DISTINCT FROM {backtrace_class}),
    bt_chain AS (
        SELECT globalTid, correlationId, min(callchainId) AS bt_chain FROM bt GROUP BY ALL
    )
    SELECT c.*, b.bt_chain FROM calls c LEFT JOIN bt_chain b USING (globalTid, correlationId)
    UNION ALL BY NAME
    SELECT b.*, NULL AS bt_chain FROM bt b ANTI JOIN calls c USING (globalTid, correlationId)
    """


# One track per thread and role: `lane` here is the role (cpu = CUDA runtime calls, driver, annotation =
# NVTX ranges, osrt = OS runtime calls, sched = scheduling, samples = CPU samples); the importer
# gives osrt, sched and samples tracks the cpu lane.
THREAD_ROLES = ("cpu", "driver", "annotation", "osrt", "sched", "samples")
THREADS_SQL = """
SELECT h.gtid, h.lane, (h.gtid >> 24) & 16777215 AS pid, h.gtid & 16777215 AS tid,
       coalesce(tn.name, nv.name) AS thread_name, p.name AS process_name
FROM (
    SELECT DISTINCT coalesce(globalTid, -1) AS gtid, lane FROM _calls
    UNION SELECT DISTINCT coalesce(globalTid, -1), 'annotation' FROM NVTX_EVENTS WHERE eventType IN ({nvtx_types})
    UNION SELECT DISTINCT coalesce(globalTid, -1), 'osrt' FROM OSRT_API
    UNION SELECT DISTINCT coalesce(globalTid, -1), 'sched' FROM SCHED_EVENTS
    UNION SELECT DISTINCT coalesce(globalTid, -1), 'samples' FROM COMPOSITE_EVENTS
) h
LEFT JOIN (SELECT t.globalTid, arg_min(s.value, t.rowid) AS name FROM ThreadNames t
           JOIN StringIds s ON s.id = t.nameId GROUP BY ALL) tn ON tn.globalTid = h.gtid
LEFT JOIN (SELECT globalTid, arg_min(text, rowid) AS name FROM NVTX_EVENTS
           WHERE eventType = {thread_name} AND text IS NOT NULL GROUP BY ALL) nv ON nv.globalTid = h.gtid
LEFT JOIN (SELECT globalPid, arg_min(name, rowid) AS name FROM PROCESSES GROUP BY ALL) p
       ON p.globalPid = h.gtid & -16777216  -- the pid part: clear the low 24 (thread) bits; a shift fails on negatives
ORDER BY pid, tid, lane
"""

DEVICE_QUEUES_SQL = """
SELECT DISTINCT deviceId, coalesce(globalPid, 0) AS gpid, streamId, lane, direction FROM (
    SELECT deviceId, globalPid, streamId, 'eu' AS lane, NULL AS direction FROM CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL SELECT deviceId, globalPid, streamId, 'eu', NULL FROM CUPTI_ACTIVITY_KIND_MEMSET
    UNION ALL SELECT m.deviceId, m.globalPid, m.streamId, k.lane, CASE WHEN k.lane = 'pcie' THEN k.direction END
              FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN _copykind k ON k.id = m.copyKind
)
WHERE deviceId IS NOT NULL AND streamId IS NOT NULL
ORDER BY deviceId, lane, streamId
"""

GPUS_SQL = "SELECT id, any_value(name) FROM TARGET_INFO_GPU GROUP BY id"

METRICS_SQL = """
SELECT g.typeId, g.metricId, m.metricName, m.typeName
FROM (SELECT DISTINCT typeId, metricId FROM GPU_METRICS) g
LEFT JOIN (SELECT typeId, metricId, any_value(metricName) AS metricName, any_value(typeName) AS typeName
           FROM TARGET_INFO_GPU_METRICS GROUP BY ALL) m USING (typeId, metricId)
ORDER BY g.typeId, g.metricId
"""

COUNTERS_SQL = """
SELECT t.track_id, g.timestamp + {off} AS ts, g.value
FROM GPU_METRICS g JOIN _metric_map t USING (typeId, metricId)
WHERE g.timestamp IS NOT NULL AND g.value IS NOT NULL
"""

# Rows each table cannot turn into a slice (no start, or an end before its start); counted and warned.
_DEV_BAD = 'start IS NULL OR "end" IS NULL OR "end" < start OR deviceId IS NULL OR streamId IS NULL'
INVALID_SQL = {
    "_calls": 'SELECT count(*) FROM _calls WHERE start IS NULL OR "end" IS NULL OR "end" < start',
    "CUPTI_ACTIVITY_KIND_KERNEL": f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {_DEV_BAD}",
    "CUPTI_ACTIVITY_KIND_MEMCPY": f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE {_DEV_BAD}",
    "CUPTI_ACTIVITY_KIND_MEMSET": f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE {_DEV_BAD}",
    "NVTX_EVENTS": "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({nvtx_types})"
                   f' AND (start IS NULL OR ("end" < start AND eventType <> {NVTX_MARK}))',
    "GPU_METRICS": "SELECT count(*) FROM GPU_METRICS WHERE timestamp IS NULL OR value IS NULL",
}

_VALID = 'x.start IS NOT NULL AND x."end" IS NOT NULL AND x."end" >= x.start'
_VALID_DEV = _VALID + " AND x.deviceId IS NOT NULL AND x.streamId IS NOT NULL"


class _Int(str):
    """An integer (BIGINT) value of args: its JSON text is its decimal text, so it is cast, not printed by
    to_json (the same text, without building a JSON value a row: 1.5 M-slice export's kernels 0.51 -> 0.40 s)."""


def _int(*exprs: str) -> _Int:
    """One BIGINT expression, or a list of them ([x, y, z], NULL when the first is: a grid or block)."""
    if len(exprs) == 1:
        return _Int(f"CAST({exprs[0]} AS VARCHAR)")
    items = " || ',' || ".join(f"coalesce(CAST({e} AS VARCHAR), 'null')" for e in exprs)
    return _Int(f"CASE WHEN {exprs[0]} IS NULL THEN NULL ELSE '[' || {items} || ']' END")


_DEV_ARGS = [("device", _int("x.deviceId")), ("context", _int("x.contextId")), ("stream", _int("x.streamId"))]


def _in_export_order(source: str, joins: str, where: str, looked_up: dict[str, str], key: str = "x.rowid") -> str:
    """A FROM clause: the rows of `source` that pass `where`, in their order in the export (`key`), each with
    the values its `joins` look up (x.lk_<name>). The builder numbers slices as they come, so this order is
    what makes every ingest of an export give its slices the same ids: a DuckDB join hands its rows on in
    whatever order its threads finish them. Only the rows and the looked-up values are sorted; the args text
    and the names are made from them afterwards, on the way out (a sort of the finished rows, args
    included, cost a 4 M-slice export 1.8 s: docs/performance.md, thirty-seventh stop)."""
    cols = ", ".join(f"{expr} AS lk_{name}" for name, expr in looked_up.items())
    return f"(SELECT x.*, {cols} FROM {source} x {joins} WHERE {where} ORDER BY {key}) x"


def _args(pairs: list[tuple[str, str]]) -> str:
    """The args JSON object of (key, SQL value) pairs, leaving out the members whose value is NULL, so
    args only list what the export recorded. Written as text: each member '"key":' || to_json(value)
    (an _Int's own text) is NULL with its value, and concat_ws skips it. The same text
    json_merge_patch('{}', json_object(...)) gave (tests/test_nsys.py), for less: that built the object,
    printed it, parsed it and the empty one, merged and printed again (2.5 M slices of a synthetic export:
    the mapping queries' CPU 3.4 -> 2.2 s, docs/performance.md, fifteenth stop)."""
    members = ", ".join("'" + json.dumps(key).replace("'", "''") + ":' || "
                        + (value if isinstance(value, _Int) else f"to_json({value})") for key, value in pairs)
    return f"('{{' || concat_ws(',', {members}) || '}}')"


# Nsight names API calls with their ABI version ("cudaLaunchKernel_v7000"): the label drops it,
# args "full name" keeps the name as recorded (docs/nsys.md).
_API_SUFFIX = r"'_v[0-9]+$'"


# Each name the calls use, labelled once (a few hundred names for hundreds of thousands of calls: the
# regular expressions per call were 80 of the 180 ms of 600 k calls' mapping query): `label` without the ABI
# version, `full` the recorded name where the label differs from it, else NULL (left out of args)
API_NAMES_SQL = f"""
CREATE TABLE _api_names AS
SELECT id, regexp_replace(value, {_API_SUFFIX}, '') AS label,
       CASE WHEN regexp_matches(value, {_API_SUFFIX}) THEN value END AS "full"
FROM StringIds WHERE id IN (SELECT DISTINCT nameId FROM _calls)
"""


def calls_sql(off: int) -> str:
    src = _in_export_order(
        "_calls", """JOIN _thread_map t ON t.gtid = coalesce(x.globalTid, -1) AND t.lane = x.lane
                     LEFT JOIN _api_names s ON s.id = x.nameId""", _VALID,
        {"track": "t.track_id", "label": "s.label", "full": 's."full"'}, key="x.src_row")
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts, x."end" - x.start AS dur,
           coalesce(x.lk_label, 'API call ' || coalesce(x.nameId::VARCHAR, '(no name)')) AS name,
           CASE x.lane WHEN 'driver' THEN 'cuda_driver' ELSE 'cuda_runtime' END AS category,
           x.correlationId AS corr_id, NULL::BIGINT AS bytes, NULL AS direction, NULL AS host_mem,
           {_args([("full name", "x.lk_full"), ("return value", _int("x.returnValue")),
                   ("callchain id", _int("coalesce(x.callchainId, x.bt_chain)"))])} AS args,
           coalesce(x.globalTid, -1) & -16777216 AS gpid,
           CASE x.lane WHEN 'driver' THEN 'drv' ELSE 'api' END AS role
    FROM {src}
    """


def kernels_sql(off: int) -> str:
    grid, block = _int("x.gridX", "x.gridY", "x.gridZ"), _int("x.blockX", "x.blockY", "x.blockZ")
    pairs = [
        ("full name", "coalesce(x.lk_dn, x.lk_mn)"), ("short name", "x.lk_sn"), ("demangled name", "x.lk_dn"),
        ("mangled name", "x.lk_mn"), *_DEV_ARGS, ("grid", grid), ("block", block),
        ("registers per thread", _int("x.registersPerThread")), ("static shared memory", _int("x.staticSharedMemory")),
        ("dynamic shared memory", _int("x.dynamicSharedMemory")), ("local memory total", _int("x.localMemoryTotal")),
        ("graph node id", _int("x.graphNodeId")),
    ]
    src = _in_export_order(
        "CUPTI_ACTIVITY_KIND_KERNEL",
        """JOIN _queue_map t ON t.deviceId = x.deviceId AND t.gpid = coalesce(x.globalPid, 0)
                            AND t.streamId = x.streamId AND t.lane = 'eu'
            LEFT JOIN StringIds dn ON dn.id = x.demangledName
            LEFT JOIN StringIds sn ON sn.id = x.shortName
            LEFT JOIN StringIds mn ON mn.id = x.mangledName""", _VALID_DEV,
        {"track": "t.track_id", "dn": "dn.value", "sn": "sn.value", "mn": "mn.value"})
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts, x."end" - x.start AS dur,
           coalesce(x.lk_sn, x.lk_dn, x.lk_mn, 'kernel') AS name, 'kernel' AS category,
           x.correlationId AS corr_id, NULL::BIGINT AS bytes, NULL AS direction, NULL AS host_mem,
           {_args(pairs)} AS args, x.globalPid AS gpid, 'exec' AS role
    FROM {src}
    """


def memcpy_sql(off: int) -> str:
    pairs = [
        *_DEV_ARGS, ("copy kind", "x.lk_short"), ("src kind", "x.lk_src"), ("dst kind", "x.lk_dst"),
        ("src device", _int("x.srcDeviceId")), ("dst device", _int("x.dstDeviceId")), ("graph node id", _int("x.graphNodeId")),
        ("memory bandwidth (GB/s)", 'CASE WHEN x."end" > x.start THEN round(x.bytes / (x."end" - x.start), 3) END'),
    ]
    src = _in_export_order(
        "CUPTI_ACTIVITY_KIND_MEMCPY", """JOIN _copykind k ON k.id = x.copyKind
            JOIN _queue_map t ON t.deviceId = x.deviceId AND t.gpid = coalesce(x.globalPid, 0)
                             AND t.streamId = x.streamId AND t.lane = k.lane
                             AND t.direction IS NOT DISTINCT FROM (CASE WHEN k.lane = 'pcie' THEN k.direction END)
            LEFT JOIN _memkind src ON src.id = x.srcKind
            LEFT JOIN _memkind dst ON dst.id = x.dstKind""", _VALID_DEV,
        {"track": "t.track_id", "short": "k.short", "direction": "k.direction", "src": "src.label",
         "dst": "dst.label", "src_host": "src.host_mem", "dst_host": "dst.host_mem"})
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts, x."end" - x.start AS dur,
           'Memcpy ' || x.lk_short || ' (' || coalesce(x.lk_src, 'Unknown') || ' -> '
               || coalesce(x.lk_dst, 'Unknown') || ')' AS name,
           'gpu_memcpy' AS category, x.correlationId AS corr_id, x.bytes, x.lk_direction AS direction,
           CASE x.lk_direction WHEN 'h2d' THEN x.lk_src_host WHEN 'd2h' THEN x.lk_dst_host END AS host_mem,
           {_args(pairs)} AS args, x.globalPid AS gpid,
           'dma' AS role
    FROM {src}
    """


def memset_sql(off: int) -> str:
    pairs = [*_DEV_ARGS, ("value", _int("x.value")), ("memory kind", "x.lk_kind"), ("graph node id", _int("x.graphNodeId"))]
    src = _in_export_order(
        "CUPTI_ACTIVITY_KIND_MEMSET",
        """JOIN _queue_map t ON t.deviceId = x.deviceId AND t.gpid = coalesce(x.globalPid, 0)
                            AND t.streamId = x.streamId AND t.lane = 'eu'
            LEFT JOIN _memkind mk ON mk.id = x.memKind""", _VALID_DEV,
        {"track": "t.track_id", "kind": "mk.label"})
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts, x."end" - x.start AS dur,
           'Memset (' || coalesce(x.lk_kind, 'Device') || ')' AS name, 'gpu_memset' AS category,
           x.correlationId AS corr_id, x.bytes, NULL AS direction, NULL AS host_mem,
           {_args(pairs)} AS args, x.globalPid AS gpid, 'exec' AS role
    FROM {src}
    """


def nvtx_sql(off: int) -> str:
    ranges = ", ".join(str(t) for t in NVTX_RANGES)
    kind = "CASE x.eventType " + " ".join(f"WHEN {t} THEN '{k}'" for t, k in NVTX_RANGES.items()) + " ELSE 'mark' END"
    pairs = [
        ("nvtx", kind), ("domain", "x.lk_domain"), ("nvtx category", _int("x.category")),
        ("color", "CASE WHEN x.color IS NULL THEN NULL ELSE printf('#%06x', x.color & 16777215) END"),
        ("range id", _int("x.rangeId")),
        ("end thread", _int("CASE WHEN x.endGlobalTid <> x.globalTid THEN x.endGlobalTid & 16777215 END")),
        ("unterminated", f'CASE WHEN x.eventType IN ({ranges}) AND x."end" IS NULL THEN true END'),
    ]
    src = _in_export_order(
        "NVTX_EVENTS", f"""JOIN _thread_map t ON t.gtid = coalesce(x.globalTid, -1) AND t.lane = 'annotation'
            LEFT JOIN StringIds s ON s.id = x.textId
            LEFT JOIN (SELECT domainId, arg_min(coalesce(n.text, s2.value), n.rowid) AS name FROM NVTX_EVENTS n
                       LEFT JOIN StringIds s2 ON s2.id = n.textId
                       WHERE n.eventType = {NVTX_DOMAIN_CREATE} GROUP BY domainId) d ON d.domainId = x.domainId""",
        f"""x.eventType IN ({NVTX_MARK}, {ranges}) AND x.start IS NOT NULL
            AND (x."end" IS NULL OR x."end" >= x.start OR x.eventType = {NVTX_MARK})""",
        {"track": "t.track_id", "text": "s.value", "domain": "d.name"})
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts,
           CASE WHEN x.eventType IN ({ranges}) AND x."end" IS NOT NULL THEN x."end" - x.start ELSE 0 END AS dur,
           coalesce(x.text, x.lk_text, '(unnamed NVTX range)') AS name, 'user_annotation' AS category,
           NULL::BIGINT AS corr_id, NULL::BIGINT AS bytes, NULL AS direction, NULL AS host_mem,
           {_args(pairs)} AS args, NULL::BIGINT AS gpid, NULL AS role
    FROM {src}
    """


def nvtx_types() -> str:
    return ", ".join(str(t) for t in [NVTX_MARK, *NVTX_RANGES])


# Correlation links between the staged slices (_links: slice_id, corr, gpid, role).
# A device op links to the driver call with its correlation id (exec for kernels and memsets,
# dma for copies) or, with none, straight to the runtime call (launch); a runtime call with a
# driver call of the same id gets a submit edge. Device ops without a process id match any.
FLOWS_SQL = """
WITH api AS (SELECT * FROM _links WHERE role = 'api'),
     drv AS (SELECT * FROM _links WHERE role = 'drv'),
     dev AS (SELECT * FROM _links WHERE role IN ('exec', 'dma'))
SELECT a.slice_id AS src, d.slice_id AS dst, 'submit' AS kind, 'correlationId' AS raw_kind
FROM api a JOIN drv d ON d.corr = a.corr AND d.gpid = a.gpid
UNION ALL
SELECT d.slice_id, g.slice_id, g.role, 'correlationId'
FROM drv d JOIN dev g ON g.corr = d.corr AND (g.gpid IS NULL OR g.gpid = d.gpid)
UNION ALL
SELECT a.slice_id, g.slice_id, 'launch', 'correlationId'
FROM api a JOIN dev g ON g.corr = a.corr AND (g.gpid IS NULL OR g.gpid = a.gpid)
WHERE NOT EXISTS (SELECT 1 FROM drv d WHERE d.corr = g.corr AND (g.gpid IS NULL OR g.gpid = d.gpid))
ORDER BY src, dst, kind
"""


def osrt_sql(off: int) -> str:
    """OS runtime library calls (pthread, poll, ioctl, ...) on the thread's "OS runtime" track."""
    src = _in_export_order(
        "OSRT_API", """JOIN _thread_map t ON t.gtid = coalesce(x.globalTid, -1) AND t.lane = 'osrt'
                        LEFT JOIN StringIds s ON s.id = x.nameId""", _VALID, {"track": "t.track_id", "name": "s.value"})
    return f"""
    SELECT x.lk_track AS track_id, x.start + {off} AS ts, x."end" - x.start AS dur,
           coalesce(x.lk_name, 'OS runtime call ' || x.nameId::VARCHAR) AS name, 'osrt' AS category,
           NULL::BIGINT AS corr_id, NULL::BIGINT AS bytes, NULL AS direction, NULL AS host_mem,
           {_args([("return value", _int("x.returnValue")), ("nesting level", _int("x.nestingLevel")),
                   ("callchain id", _int("x.callchainId"))])}
               AS args, NULL::BIGINT AS gpid, NULL AS role
    FROM {src}
    """


def sched_sql(off: int, end_ns: int) -> str:
    """Thread scheduling: each sched-in to the thread's next sched-out is a slice "on CPU n".

    A sched-in with no later sched-out runs to the end of the report (args "open": true); a
    sched-out with no sched-in before it starts at the report's first event is not drawn
    (counted by sched_unpaired_sql).
    """
    return f"""
    WITH e AS (
        SELECT coalesce(globalTid, -1) AS gtid, start, cpu, isSchedIn <> 0 AS sin, rowid AS src_row,
               lead(start) OVER w AS next_start, lead(isSchedIn <> 0) OVER w AS next_in
        FROM SCHED_EVENTS WHERE start IS NOT NULL
        WINDOW w AS (PARTITION BY coalesce(globalTid, -1) ORDER BY start, isSchedIn, rowid))
    SELECT t.track_id, e.start + {off} AS ts,
           CASE WHEN e.next_start IS NULL THEN greatest(0, {end_ns} - e.start) ELSE e.next_start - e.start END AS dur,
           'on CPU ' || e.cpu AS name, 'sched' AS category,
           NULL::BIGINT AS corr_id, NULL::BIGINT AS bytes, NULL AS direction, NULL AS host_mem,
           {_args([("cpu", "e.cpu"), ("open", "CASE WHEN e.next_start IS NULL THEN true END")])} AS args,
           NULL::BIGINT AS gpid, NULL AS role
    FROM e JOIN _thread_map t ON t.gtid = e.gtid AND t.lane = 'sched'
    WHERE e.sin AND (e.next_in IS NULL OR NOT e.next_in)
    ORDER BY t.track_id, e.start, e.cpu, e.src_row
    """


SCHED_UNPAIRED_SQL = """
WITH e AS (SELECT isSchedIn <> 0 AS sin, lead(isSchedIn <> 0) OVER (
               PARTITION BY coalesce(globalTid, -1) ORDER BY start, isSchedIn, rowid) AS next_in,
           lag(isSchedIn <> 0) OVER (PARTITION BY coalesce(globalTid, -1) ORDER BY start, isSchedIn, rowid) AS prev_in
           FROM SCHED_EVENTS WHERE start IS NOT NULL)
SELECT count(*) FILTER (WHERE sin AND next_in), count(*) FILTER (WHERE NOT sin AND NOT coalesce(prev_in, false))
FROM e
"""


def samples_sql(off: int) -> str:
    """CPU samples: an instant per sample on the thread's "samples" track, named by its leaf frame,
    with the whole call stack (leaf first, "symbol (module)") in args "stack"."""
    return f"""
    WITH st AS (
        SELECT c.id, list(coalesce(sy.value, '?') || ' (' || coalesce(mo.value, '?') || ')' ORDER BY c.stackDepth)
                   AS stack,
               arg_min(coalesce(sy.value, '?'), c.stackDepth) AS leaf
        FROM SAMPLING_CALLCHAINS c
        LEFT JOIN StringIds sy ON sy.id = c.symbol LEFT JOIN StringIds mo ON mo.id = c.module
        GROUP BY c.id)
    SELECT t.track_id, x.start + {off} AS ts, 0::BIGINT AS dur, coalesce(st.leaf, 'sample') AS name,
           'cpu_sample' AS category, NULL::BIGINT AS corr_id, NULL::BIGINT AS bytes, NULL AS direction,
           NULL AS host_mem, {_args([("cpu", "x.cpu"), ("thread state", "x.threadState"), ("stack", "st.stack")])} AS args,
           NULL::BIGINT AS gpid, NULL AS role
    FROM COMPOSITE_EVENTS x
    JOIN _thread_map t ON t.gtid = coalesce(x.globalTid, -1) AND t.lane = 'samples'
    LEFT JOIN st ON st.id = x.id
    WHERE x.start IS NOT NULL
    ORDER BY t.track_id, x.start, x.id
    """
