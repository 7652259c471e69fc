"""Nsight Systems SQLite exports (`nsys export --type sqlite`), schema 2.x (Nsight 2022) and 3.x (2023+).

Mapping (DESIGN.md): CUDA runtime calls and NVTX ranges -> `cpu` tracks per process and
thread; CUDA driver calls -> `driver`; HtoD/DtoH/PtoP copies -> `pcie` per device and
direction; kernels, memsets and device-side copies -> `eu` per device and stream; GPU
metrics -> `counter` tracks; correlation ids -> flows (launch, or submit + exec/dma when a
driver call carries the id). docs/nsys.md documents every choice.

The export's tables are copied into a DuckDB staging database (in memory, spilling into the
ingest's work directory past STAGE_MEMORY) and mapped there in SQL, so memory stays bounded
and no Python runs per event.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from acceltrace.ingest.nsys import map as m
from acceltrace.ingest.nsys import read as r
from acceltrace.ingest.nsys.links import Links
from acceltrace.ingest.importer import Importer, per_source
from acceltrace.store.duck import quote_ident

NAME = "nsys"
SUFFIXES = (".sqlite", ".nsys.sqlite", ".sqlite3")
SLICE_COLUMNS = ["track_id", "ts", "dur", "name", "category", "corr_id", "bytes", "direction", "host_mem", "args"]
# rows per batch from the mapping queries into the builder: DuckDB's cost per appended row falls with the
# batch (2.83 M-row export: ingest 5.0-6.0 s at 131 k, 4.2-4.3 s at 512 k and at 1 M; the peak no higher)
BATCH_ROWS = 524_288
STAGE_MEMORY = "1GB"
# an export with more rows in these tables than the spill threshold: its build in the bounded regime from the first
# slice and its stage held to less memory beside it (4 M rows: peak 1.71 -> 1.43 GB, time level; docs/performance.md)
# (the reader's event and CPU tables but the counters and the samples' call stacks: about a slice a row, a
# scheduling pair two rows for one)
SLICE_TABLES = tuple(t for t in {**r.EVENT_TABLES, **r.CPU_TABLES} if t not in ("GPU_METRICS", "SAMPLING_CALLCHAINS"))
BOUNDED_STAGE_MEMORY = "500MB"
# An in-memory DuckDB checkpoints too, past checkpoint_threshold (16 MB of inserts): each compresses the tables,
# 0.3-0.6 s at a time, several times in a 1.5 M-slice export's copy and mapping (medians 4.87-5.23 -> 4.77-5.03 s,
# the peak level). Not bounded: uncompressed, its stage spills more (4 M slices: 16.5-17.7 -> 17.1-18.3 s).
STAGE_CHECKPOINT = "1TB"


def sniff(head: bytes) -> bool:
    """Any SQLite file; the Nsight tables are checked when it is opened (with a message naming what is missing)."""
    return head.startswith(r.SQLITE_MAGIC)


def ingest(source, builder) -> None:
    work = builder.work_dir
    work.mkdir(parents=True, exist_ok=True)
    path = source.materialize(work)
    ex = r.open_export(path, source.name)
    try:
        bounded = builder.expect_slices(sum(ex.rows.get(t, 0) for t in SLICE_TABLES))
        # in memory (no WAL, no checkpoint on close) but spilling to the work directory past the limit
        spill = work / f"nsys-stage-{len(list(work.glob('nsys-stage-*')))}"
        config = {"temp_directory": str(spill), "memory_limit": BOUNDED_STAGE_MEMORY if bounded else STAGE_MEMORY,
                  "preserve_insertion_order": "true", **({} if bounded else {"checkpoint_threshold": STAGE_CHECKPOINT})}
        stage = duckdb.connect(":memory:", config=config)
        try:
            links = Links(work / f"{spill.name}-links.arrows" if bounded else None)
            try:
                _Ingest(ex, stage, builder, source, links).run()
            finally:
                links.close()
        finally:
            stage.close()
    finally:
        ex.close()
        if path != getattr(source, "path", None):  # a decompressed copy: its disk space goes now
            path.unlink(missing_ok=True)


class _Ingest:
    def __init__(self, ex: r.Export, stage: duckdb.DuckDBPyConnection, builder, source, links: Links):
        self.ex, self.stage, self.b, self.source = ex, stage, builder, source
        self.prefix = f"{source.group}: " if getattr(source, "group", None) else ""
        self.links = links  # the slices' correlation links, for the flows query (ingest/nsys/links.py)
        self.off = 0
        self.unreadable: set[str] = set()

    def q(self, sql: str):
        return self.stage.execute(sql)

    def run(self) -> None:
        ex = self.ex
        jobs = [(t, spec, None) for t, spec in {**r.EVENT_TABLES, **r.NAME_TABLES}.items()]
        for t, spec in r.CPU_TABLES.items():
            missing = [c for c in spec[0] if c not in ex.columns.get(t, ())] if ex.has(t) else []
            if missing:  # drawn when readable; a table of another layout is named, never guessed at
                self.b.warn(ex.name, f"table {t} lacks column(s) {', '.join(missing)}: its"
                            f" {r.GIVES[t]} were not read", f"table {t}", dropped=ex.rows.get(t, 0))
                self.unreadable.add(t)
            jobs.append(("" if missing else t, spec, t))  # unreadable: created empty
        # two tables at a time, unless the build is held to one thread (a fleet runs one build per core)
        r.copy_tables(ex, self.stage, jobs, workers=1 if self.b.threads == 1 else 2)
        start_utc = r.session_start_utc_ns(ex)
        if start_utc is not None and not 0 < start_utc < r.TIME_LIMIT_NS:
            self.b.warn(ex.name, f"the session start {start_utc} is not a plausible UTC time in ns (expected"
                        f" 0 < t < {r.TIME_LIMIT_NS}); times stay relative to the Nsight session",
                        "table TARGET_INFO_SESSION_START_TIME")
            start_utc = None
        self.off = start_utc or 0
        self._meta(start_utc)
        self._enums()
        self.q(m.calls_table_sql(*self._event_classes(), has_driver_table=True))
        self.q(m.API_NAMES_SQL)
        self._warn_invalid()
        self._thread_tracks()
        self._queue_tracks()
        for sql in (m.calls_sql(self.off), m.nvtx_sql(self.off), m.kernels_sql(self.off),
                    m.memcpy_sql(self.off), m.memset_sql(self.off)):
            self._add_slices(sql)
        self._cpu_tables()
        self._counters()
        self._drop_tables()  # the flows read the links alone
        # every slice, track and counter sample is in: the LOD build and the write of `slices` start beside the
        # flows, which are joined in this importer's own database, not from the builder's staged slices
        # (ingest/lod_ahead.py)
        if self.b.sole_source:
            self.b.lod_ahead(links_read_staging=False, write_ahead=True)
        self._flows()
        self._not_present()

    def _drop_tables(self) -> None:
        """The export's copied tables and the mapping's own, let go once every slice and sample is out of them,
        before the flows, so their memory is not held beside the write of `slices` that runs with the flows."""
        for (name,) in self.q("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
                              ).fetchall():
            self.q(f"DROP TABLE {quote_ident(name)}")

    def _cpu_tables(self) -> None:
        """OS runtime calls, scheduling and CPU samples (docs/nsys.md), when the export has them."""
        if "OSRT_API" not in self.unreadable:
            self._add_slices(m.osrt_sql(self.off))
        if "SCHED_EVENTS" not in self.unreadable and self.ex.has("SCHED_EVENTS"):
            # an open sched-in runs to the report's last event (of any table read)
            (end,) = self.q('SELECT greatest(' + ', '.join(
                f'(SELECT max({c}) FROM {t})' for t, c in (
                    ("SCHED_EVENTS", "start"), ("_calls", '"end"'), ("CUPTI_ACTIVITY_KIND_KERNEL", '"end"'),
                    ("CUPTI_ACTIVITY_KIND_MEMCPY", '"end"'), ("CUPTI_ACTIVITY_KIND_MEMSET", '"end"'),
                    ("NVTX_EVENTS", 'coalesce("end", start)'), ("OSRT_API", '"end"'),
                    ("COMPOSITE_EVENTS", "start"))) + ')').fetchall()[0]
            self._add_slices(m.sched_sql(self.off, int(end or 0)))
            double_in, lone_out = self.q(m.SCHED_UNPAIRED_SQL).fetchall()[0]
            if double_in or lone_out:
                self.b.warn(self.ex.name, f"{double_in} sched-in events followed by another sched-in and {lone_out}"
                            " sched-out events without a sched-in before them were not drawn", "table SCHED_EVENTS",
                            dropped=int(double_in) + int(lone_out))
        if not {"COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"} & self.unreadable:
            self._add_slices(m.samples_sql(self.off))

    def _not_present(self) -> None:
        """trace_meta not_present: each table we would read that the export lacks or holds empty."""
        out = []
        for t, gives in r.GIVES.items():
            if t in self.unreadable:
                state = "unreadable"
            elif t not in self.ex.columns:
                state = "absent"
            elif not self.ex.has(t):
                state = "empty"
            else:
                continue
            out.append({"source": t, "gives": gives, "state": state})
        self.b.set_meta("not_present", json.dumps(out))

    # -- metadata ----------------------------------------------------------------------------
    def _meta(self, start_utc: int | None) -> None:
        meta = self.ex.meta
        version = meta.get("EXPORT_SCHEMA_VERSION")
        if version:
            self.b.set_meta("nsys_schema_version", version)
        product = meta.get("EXPORT_PRODUCT_VERSION") or meta.get("NSIGHT_SYSTEMS_VERSION")
        if product:
            self.b.set_meta("nsys_version", product)
        self.b.set_meta("profiler", f"Nsight Systems {product}" if product else "Nsight Systems")
        versions = {k: v for k, v in (("nsys_version", product), ("export_schema_version", version)) if v}
        if {"name", "value"} <= self.ex.columns.get("TARGET_INFO_SYSTEM_ENV", set()):  # only named facts: the
            # table also holds the whole process environment, which the trace info must not show
            for row in _rows(self.ex, "TARGET_INFO_SYSTEM_ENV", where=f"name IN ({', '.join(map(repr, _ENV_FACTS))})"):
                versions.setdefault(str(row.get("name")), str(row.get("value")))
        self.b.set_meta("versions", json.dumps(versions, sort_keys=True))
        gpus = _rows(self.ex, "TARGET_INFO_GPU")
        if gpus:
            self.b.set_meta("device_properties", json.dumps(gpus))
        if start_utc is not None:
            self.b.set_meta("clock", "utc_epoch")
            self.b.set_meta("nsys_session_start_utc_ns", str(start_utc))
        else:
            self.b.set_meta("clock", "nsys_session")
            if "utcEpochNs" not in self.ex.columns.get("TARGET_INFO_SESSION_START_TIME", set()):
                self.b.warn(self.ex.name, "no TARGET_INFO_SESSION_START_TIME: times stay relative to the Nsight session")

    def _event_classes(self) -> tuple[int, int]:
        """Ids of the driver and backtrace event classes (enum table when present, else Nsight's values)."""
        names = dict(self.q("SELECT name, id FROM ENUM_NSYS_EVENT_CLASS").fetchall())
        return (names.get("TRACE_PROCESS_EVENT_CUDA_DRIVER", 1), names.get("TRACE_PROCESS_EVENT_CUDABACKTRACE", 67))

    def _enums(self) -> None:
        rows = self.q("SELECT id, name, label FROM ENUM_CUDA_MEM_KIND").fetchall()
        if rows:
            kinds = {i: (name.removeprefix("CUDA_MEMOPR_MEMORY_KIND_"), label or name) for i, name, label in rows}
        else:
            kinds = m.MEM_KINDS_DEFAULT
        host = {"PAGEABLE": "pageable", "PINNED": "pinned"}
        self.stage.register("_memkind_src", pa.table({
            "id": pa.array(list(kinds), pa.int64()),
            "label": [lbl.title() if lbl.isupper() else lbl for _, lbl in kinds.values()],
            "host_mem": [host.get(sym) for sym, _ in kinds.values()],
        }))
        self.q("CREATE TABLE _memkind AS SELECT * FROM _memkind_src")
        self.stage.unregister("_memkind_src")
        self.stage.register("_copykind_src", pa.table({
            "id": pa.array(list(m.COPY_KINDS), pa.int64()),
            "short": [v[0] for v in m.COPY_KINDS.values()],
            "direction": [v[1] for v in m.COPY_KINDS.values()],
            "lane": [v[2] for v in m.COPY_KINDS.values()],
        }))
        self.q("CREATE TABLE _copykind AS SELECT * FROM _copykind_src")
        self.stage.unregister("_copykind_src")
        (unknown,) = self.q(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"
            " WHERE copyKind IS NULL OR copyKind NOT IN (SELECT id FROM _copykind)"
        ).fetchall()[0]
        if unknown:
            self.b.warn(self.ex.name, f"{unknown} copies with an unknown copyKind were left out"
                        f" (expected one of {sorted(m.COPY_KINDS)})", "table CUPTI_ACTIVITY_KIND_MEMCPY",
                        dropped=unknown)

    def _warn_invalid(self) -> None:
        for table, sql in m.INVALID_SQL.items():
            (n,) = self.q(sql.format(nvtx_types=m.nvtx_types())).fetchall()[0]
            if n:
                label = "CUPTI_ACTIVITY_KIND_RUNTIME/DRIVER" if table == "_calls" else table
                what = "a start" if table in ("_calls", "NVTX_EVENTS") else (
                    "a timestamp or value" if table == "GPU_METRICS" else "a start, device or stream")
                self.b.warn(self.ex.name, f"{n} rows without {what}, or with an end before their start,"
                            " were left out", f"table {label}", dropped=n)
        (unterminated,) = self.q(
            f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({', '.join(map(str, m.NVTX_RANGES))})"
            ' AND "end" IS NULL AND start IS NOT NULL').fetchall()[0]
        if unterminated:
            self.b.warn(self.ex.name, f"{unterminated} NVTX ranges never ended; kept as instants marked unterminated",
                        "table NVTX_EVENTS")
        known = ", ".join(str(t) for t in sorted({*m.NVTX_METADATA, m.NVTX_MARK, *m.NVTX_RANGES}))
        (other,) = self.q(f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType NOT IN ({known})").fetchall()[0]
        if other:
            self.b.warn(self.ex.name, f"{other} NVTX records of unknown eventType were left out",
                        "table NVTX_EVENTS", dropped=other)

    # -- tracks ------------------------------------------------------------------------------
    def _thread_tracks(self) -> None:
        rows = self.q(m.THREADS_SQL.format(nvtx_types=m.nvtx_types(), thread_name=m.NVTX_THREAD_NAME)).fetchall()
        gtids, lanes, track_ids = [], [], []
        for gtid, lane, pid, tid, thread_name, process_name in rows:
            if gtid == -1:
                group, name, proc, thr, sort = "unknown process", "unknown thread", None, None, 1 << 40
            else:
                pname = Path(process_name).name if process_name else "process"
                group = f"{pname} (pid {pid})"
                name = f"{thread_name} ({tid})" if thread_name else f"thread {tid}"
                proc, thr, sort = str(pid), str(tid), 0 if tid == pid else tid
            role = lane
            lane = {"osrt": "cpu", "sched": "cpu", "samples": "cpu"}.get(role, role)
            name += _ROLE_SUFFIX[role]
            track = self.b.track(lane, name, group_name=self.prefix + group, process=proc, thread=thr,
                                 sort_key=sort * 8 + m.THREAD_ROLES.index(role),
                                 key=(NAME, self.prefix, "thread", gtid, role))
            lane = role
            gtids.append(gtid)
            lanes.append(lane)
            track_ids.append(track)
        self._map_table("_thread_map", {"gtid": pa.array(gtids, pa.int64()), "lane": lanes,
                                        "track_id": pa.array(track_ids, pa.int64())})

    def _queue_tracks(self) -> None:
        gpus = dict(self.q(m.GPUS_SQL).fetchall())
        rows = self.q(m.DEVICE_QUEUES_SQL).fetchall()
        pids_per_device: dict[int, set[int]] = {}
        for dev, gpid, _stream, lane, _d in rows:
            if lane == "eu":
                pids_per_device.setdefault(dev, set()).add(gpid)
        cols: dict[str, list] = {k: [] for k in ("deviceId", "gpid", "streamId", "lane", "direction", "track_id")}
        for dev, gpid, stream, lane, direction in rows:
            group = self.prefix + (f"GPU {dev} ({gpus[dev]})" if gpus.get(dev) else f"GPU {dev}")
            if lane == "pcie":
                name = direction.upper()
                sort = ("h2d", "d2h", "p2p").index(direction)
                key = (NAME, self.prefix, "pcie", dev, direction)
            else:
                several = len(pids_per_device.get(dev, ())) > 1
                name = f"stream {stream}" + (f" (pid {(gpid >> 24) & 0xFFFFFF})" if several else "")
                sort = 16 + stream * 2
                key = (NAME, self.prefix, "eu", dev, gpid if several else 0, stream)
            track = self.b.track(lane, name, group_name=group, device=str(dev), sort_key=sort, key=key)
            for k, v in zip(cols, (dev, gpid, stream, lane, direction, track)):
                cols[k].append(v)
        self._map_table("_queue_map", {
            "deviceId": pa.array(cols["deviceId"], pa.int64()), "gpid": pa.array(cols["gpid"], pa.int64()),
            "streamId": pa.array(cols["streamId"], pa.int64()), "lane": pa.array(cols["lane"], pa.string()),
            "direction": pa.array(cols["direction"], pa.string()),
            "track_id": pa.array(cols["track_id"], pa.int64()),
        })

    def _map_table(self, name: str, columns: dict) -> None:
        self.stage.register("_map_src", pa.table(columns))
        self.q(f"CREATE TABLE {name} AS SELECT * FROM _map_src")
        self.stage.unregister("_map_src")

    # -- events ------------------------------------------------------------------------------
    def _add_slices(self, sql: str) -> None:
        for batch in self.stage.sql(sql).to_arrow_reader(BATCH_ROWS):
            if batch.num_rows == 0:
                continue
            tbl = pa.Table.from_batches([batch])
            self.links.add(self.b.add_slices(tbl.select(SLICE_COLUMNS)), tbl)

    def _flows(self) -> None:
        """The correlation flows; and how many device ops none reached (trace_meta), from the flows themselves:
        a device op is linked exactly when it is the far end of an exec, dma or launch flow (a second join
        of the links for the count cost 0.2 s of a 2.5 M-slice export)."""
        reached = []
        with self.links.viewed(self.stage):
            for batch in self.stage.sql(m.FLOWS_SQL).to_arrow_reader(BATCH_ROWS):
                if batch.num_rows:
                    self.b.add_flows(batch.column(0), batch.column(1), batch.column(2), batch.column(3))
                    to_op = pc.not_equal(batch.column(2), "submit")
                    reached.append(batch.column(1).filter(to_op).to_numpy(zero_copy_only=False))
            (ops,) = self.q("SELECT count(*) FROM _links WHERE role IN ('exec', 'dma')").fetchall()[0]
        unlinked = ops - _distinct(np.concatenate(reached)) if reached else ops
        if unlinked:
            self.b.set_meta("nsys_unlinked_device_ops", str(unlinked))

    def _counters(self) -> None:
        rows = self.q(m.METRICS_SQL).fetchall()
        if not rows:
            return
        gpus = dict(self.q(m.GPUS_SQL).fetchall())
        type_ids, metric_ids, track_ids = [], [], []
        for type_id, metric_id, metric_name, type_name in rows:
            name, unit = _metric_name_unit(metric_name or f"metric {metric_id}")
            dev = _gpu_of(type_name)
            if dev is None and len(gpus) == 1:  # one GPU in the report: its metrics are that GPU's
                dev = next(iter(gpus))
            if dev is not None:
                group = f"GPU {dev} ({gpus[dev]})" if gpus.get(dev) else f"GPU {dev}"
            else:
                group = f"GPU metrics {type_name or type_id}"
            track = self.b.track("counter", name, group_name=self.prefix + group,
                                 device=str(dev) if dev is not None else (type_name or str(type_id)),
                                 unit=unit, sort_key=1000 + len(track_ids),
                                 key=(NAME, self.prefix, "metric", type_id, metric_id))
            type_ids.append(type_id)
            metric_ids.append(metric_id)
            track_ids.append(track)
        self._map_table("_metric_map", {"typeId": pa.array(type_ids, pa.int64()),
                                        "metricId": pa.array(metric_ids, pa.int64()),
                                        "track_id": pa.array(track_ids, pa.int64())})
        reader = self.stage.sql(m.COUNTERS_SQL.format(off=self.off)).to_arrow_reader(BATCH_ROWS)
        for batch in reader:
            if batch.num_rows:
                self.b.add_counters(batch.column(0), batch.column(1), batch.column(2))


_ENV_FACTS = ("NvDriverVersion", "CudaDriverVersion", "CudaRuntimeVersion", "OsDescription", "CpuDescription",
              "CpuCores", "HardwarePlatform")
_ROLE_SUFFIX = {"cpu": "", "driver": "", "annotation": " NVTX", "osrt": " OS runtime", "sched": " scheduling",
                "samples": " samples"}
_UNIT = re.compile(r"^(.*?)\s*\[([^\]]+)\]\s*$")
_GPU = re.compile(r"\bGPU\s*(\d+)\b", re.IGNORECASE)


def _distinct(a: np.ndarray) -> int:
    """How many distinct values `a` holds: by a sort (numpy 2.4's np.unique hashes: 0.6-0.7 s for 1 M ids
    here, against 0.03 s)."""
    if not len(a):
        return 0
    a = np.sort(a)
    return 1 + int(np.count_nonzero(a[1:] != a[:-1]))


def _rows(ex: r.Export, table: str, limit: int = 256, where: str = "TRUE") -> list[dict]:
    """A small table's rows as dicts (device and system facts for the trace info), [] when absent."""
    if table not in ex.columns:
        return []
    saved = ex.con.text_factory
    ex.con.text_factory = lambda b: b.decode("utf-8", "replace")  # real exports hold stray bytes here
    try:
        cur = ex.con.execute(f'SELECT * FROM {quote_ident(table)} WHERE {where} LIMIT {int(limit)}')
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
    finally:
        ex.con.text_factory = saved
    return [{k: v for k, v in zip(names, row) if v is not None and v != ""} for row in rows]


def _metric_name_unit(metric_name: str) -> tuple[str, str | None]:
    """'PCIe Read Throughput [Throughput %]' -> ('PCIe Read Throughput', '%'); units sit in Nsight's brackets."""
    hit = _UNIT.match(metric_name)
    if not hit:
        return metric_name, None
    name, unit = hit.group(1), hit.group(2)
    return name, "%" if unit.endswith("%") else unit


def _gpu_of(type_name: str | None) -> int | None:
    hit = _GPU.search(type_name or "")
    return int(hit.group(1)) if hit else None


IMPORTER = Importer(name=NAME, suffixes=SUFFIXES, sniff=sniff, session=per_source(ingest))
