"""Every sample trace opens, and what is stored agrees with counts computed here from the raw file
with plain json / gzip / tarfile / sqlite3 (issue 13, "Done when"):

- slices per lane (the lane of each raw event from its category, as DESIGN.md maps them),
- the deepest nesting, computed by a sweep over the raw events, equals the deepest depth stored,
  and the drawn depth (lod_tracks.max_depth) equals the stored one on every track,
- device busy = the union of each device's kernel, memset and copy intervals,
- every kernel's flow starts at the call that launched it (its correlation id's driver call, else
  its runtime call), at that call's own depth -- also for launches deeper than 48 levels.

The raw side never imports acceltrace: it is an independent reading of the same files.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sqlite3
import tarfile
from collections import Counter, defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from acceltrace.ingest import builder as builder_mod
from acceltrace.ingest.pipeline import ingest_paths
from acceltrace.store import utilization
from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
CHROME = sorted((SAMPLES / "chrome" / "kineto").rglob("*.json*")) + sorted(
    (SAMPLES / "chrome" / "kineto").rglob("*.tar.gz"))
NSYS = sorted((SAMPLES / "nsys" / "nsys-2022.2").glob("*.sqlite"))
OTHER = sorted((SAMPLES / "atrace" / "acceltrace-0.1").glob("*.atrace")) + sorted(
    (SAMPLES / "actr" / "acceltrace-0.1").glob("*.actr")) + sorted(
    p for p in (SAMPLES / "run" / "acceltrace-sim-0.1").iterdir() if p.is_dir())


def _rel(p: Path) -> str:
    return str(p.relative_to(SAMPLES))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # the store's own tables only: level-of-detail tables and passes have their own tests
    mp = pytest.MonkeyPatch()
    mp.setattr(builder_mod, "build_lod", lambda con, **kw: None)
    yield Store(tmp_path_factory.mktemp("real-traces"))
    mp.undo()


@pytest.fixture(scope="module")
def ingested(store):
    """Each sample ingested once (no analysis)."""
    return {_rel(p): ingest_paths(store, [p])[0] for p in CHROME + NSYS + OTHER}


def _meta(con) -> dict:
    return dict(con.execute("SELECT key, value FROM trace_meta").fetchall())


# -- the raw side -----------------------------------------------------------------------------------
def _ns(v) -> int:
    """Microseconds (int, float text or Decimal) -> ns, half away from zero (as exact as the file)."""
    return int((Decimal(str(v)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _docs(path: Path) -> list:
    """The JSON documents of a file: one, or one per member of a .tar.gz."""
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path) as tar:
            return [json.load(io.TextIOWrapper(_maybe_gz(tar.extractfile(m)), encoding="utf-8"), parse_float=Decimal)
                    for m in sorted(tar.getmembers(), key=lambda m: m.name) if m.isfile() and ".json" in m.name]
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return [json.load(f, parse_float=Decimal)]


def _maybe_gz(f):
    head = f.peek(2)[:2] if hasattr(f, "peek") else b""
    return gzip.GzipFile(fileobj=f) if head == b"\x1f\x8b" else f


_HOST_COPY = re.compile(r"\b(HtoD|DtoH|PtoP)\b")
_CPU = {"cpu_op", "operator", "python_function", "user_annotation", "cuda_runtime", "runtime", "cpu_instant_event",
        "overhead", "external_correlation", "cuda_event", "python_op"}
_DRIVER = {"cuda_driver", "mtia_runtime", "privateuse1_runtime", "privateuse1_driver", "driver"}


def raw_lane(ev: dict) -> str:
    cat, name = (ev.get("cat") or "").lower(), ev.get("name") or ""
    if cat in ("kernel", "gpu_memset", "memset", "hardware_counters"):
        return "eu"
    if cat in ("gpu_memcpy", "memcpy"):
        return "pcie" if _HOST_COPY.search(name) else "eu"
    if cat == "mtia_ccp_events":
        return "pcie" if name.lower().startswith("dma") or "dma_request" in name.lower() else "eu"
    if cat in ("gpu_user_annotation", "trace", "cuda_sync"):
        return "annotation"
    if cat in _DRIVER:
        return "driver"
    if cat in _CPU:
        return "cpu"
    return "eu" if str(ev.get("tid", "")).lower().startswith("stream") else "cpu"


class Raw:
    """A Chrome file read plainly: per event its source, lane, track key, ns times and depth."""

    def __init__(self, path: Path):
        self.slices = []  # [src, lane, track key, ts, dur, name, args]
        for src, doc in enumerate(_docs(path)):
            events = doc["traceEvents"] if isinstance(doc, dict) else doc
            for ev in events:
                ph = ev.get("ph")
                if ph not in ("X", "i", "I"):
                    continue
                if ph != "X" and ev.get("name") == "[memory]":
                    continue  # levels over time: counter tracks, not slices
                lane = raw_lane(ev)
                pid, tid = str(ev.get("pid", "")), str(ev.get("tid", ""))
                if ph != "X" and ev.get("s") in ("g", "p"):
                    key = (src, "scope", pid if ev["s"] == "p" else "")
                elif lane == "pcie":
                    m = _HOST_COPY.search(ev.get("name") or "")
                    args = ev.get("args") or {}
                    key = (src, pid, "pcie", m.group(1) if m else str(args.get("direction", "")))
                else:
                    key = (src, pid, tid, lane)
                dur = _ns(ev.get("dur", 0)) if ph == "X" else 0
                args = ev.get("args") or {}
                corr = args.get("correlation") if isinstance(args, dict) else None
                self.slices.append([src, lane, key, _ns(ev["ts"]), dur, ev.get("name") or "",
                                    {"correlation": corr} if corr is not None else {}])
        self.depth = self._depths()

    def _depths(self) -> list[int]:
        """Open slices at each start: ends before starts at one time, longer starts first, instants'
        ends after every start (the builder's documented rule)."""
        by_track = defaultdict(list)
        for i, s in enumerate(self.slices):
            by_track[s[2]].append(i)
        depth = [0] * len(self.slices)
        self.crossed = set()  # tracks with partial overlaps (a slice ending while one it encloses is open)
        for key, idx in by_track.items():
            points = []
            for i in idx:
                ts, dur = self.slices[i][3], self.slices[i][4]
                points.append((ts, 1, -dur, i))
                points.append((ts + dur, 0, 0, i) if dur > 0 else (ts, 2, 0, i))
            points.sort()
            stack = []
            for _, kind, _, i in points:
                if kind == 1:
                    depth[i] = len(stack)
                    stack.append(i)
                elif stack and stack[-1] == i:
                    stack.pop()
                else:
                    self.crossed.add(key)
                    stack.remove(i)
        return depth

    def max_depth_per_thread(self) -> dict:
        """(lane, pid, tid) -> deepest depth, for properly nested thread tracks (single-source files)."""
        out = {}
        for i, s in enumerate(self.slices):
            key = s[2]
            if len(key) == 4 and key[2] != "pcie" and key not in self.crossed:
                k = (s[1], key[1], key[2])
                out[k] = max(out.get(k, 0), self.depth[i])
        return out

    def per_lane(self) -> Counter:
        return Counter(s[1] for s in self.slices)

    def device_busy(self) -> dict:
        """Per (source, device pid): the union of its eu and pcie intervals, in ns."""
        ivs = defaultdict(list)
        for s in self.slices:
            if s[1] in ("eu", "pcie") and s[4] > 0 and s[2][1] != "scope":
                ivs[(s[0], s[2][1])].append((s[3], s[3] + s[4]))
        return {k: _union(v) for k, v in ivs.items()}

    def launches(self) -> dict:
        """Per device op (by correlation id, single-source files): (name, dur, depth) of the call that
        launched it -- the driver call with its correlation id, else the earliest CPU call with it."""
        calls: dict[tuple, tuple] = {}
        for i, s in enumerate(self.slices):
            corr = s[6].get("correlation") if isinstance(s[6], dict) else None
            if corr is None or s[1] not in ("cpu", "driver"):
                continue
            k = (s[1], corr)
            if k not in calls or s[3] < calls[k][0]:
                calls[k] = (s[3], s[5], s[4], self.depth[i])
        out = {}
        for s in self.slices:
            corr = s[6].get("correlation") if isinstance(s[6], dict) else None
            if corr is None or s[1] not in ("eu", "pcie"):
                continue
            call = calls.get(("driver", corr)) or calls.get(("cpu", corr))
            if call:
                out[(corr, s[5], s[4])] = call[1:]
        return out

    def launch_depths_nested(self) -> set:
        """Correlation ids whose launching call sits on a properly nested track (its depth is exact)."""
        out = set()
        for i, s in enumerate(self.slices):
            corr = s[6].get("correlation") if isinstance(s[6], dict) else None
            if corr is not None and s[1] in ("cpu", "driver") and s[2] not in self.crossed:
                out.add(corr)
        return out


def _union(ivs: list) -> int:
    total, end = 0, None
    for a, b in sorted(ivs):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


# -- Chrome ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def raws():
    cache = {}  # the last file read, and the xDiT trace (two tests read it): memory stays bounded

    def get(path: Path) -> Raw:
        if path not in cache:
            for k in [k for k in cache if "xdit" not in k.name]:
                del cache[k]
            cache[path] = Raw(path)
        return cache[path]
    return get


@pytest.mark.parametrize("path", CHROME, ids=_rel)
def test_chrome_sample_agrees_with_its_raw_file(store, ingested, raws, path):
    res = ingested[_rel(path)]
    assert res.error is None, res.error
    con = store.connect(res.id)
    raw = raws(path)
    assert int(_meta(con)["dropped_events"]) == 0
    stored = dict(con.execute("SELECT t.lane, count(*) FROM slices s JOIN tracks t USING (track_id)"
                              " GROUP BY t.lane").fetchall())
    assert stored == dict(raw.per_lane())
    # depths: on properly nested tracks the stored depth is the nesting depth; tracks with partial
    # overlaps get more rows, never fewer (no two overlapping slices share a depth: all are visible)
    assert con.execute("SELECT max(depth) FROM slices").fetchone()[0] >= max(raw.depth)
    if not raw.crossed:
        assert con.execute("SELECT max(depth) FROM slices").fetchone()[0] == max(raw.depth)
    if len({s[0] for s in raw.slices}) == 1:
        stored_depth = {(lane, p, t): d for lane, p, t, d in con.execute(
            "SELECT t.lane, t.process, t.thread, max(s.depth) FROM slices s JOIN tracks t USING (track_id)"
            " WHERE t.thread IS NOT NULL GROUP BY ALL").fetchall()}
        nested = raw.max_depth_per_thread()
        assert {k: stored_depth.get(k) for k in nested} == nested
    collide = con.execute(
        "SELECT count(*) FROM (SELECT ts, lag(ts + dur) OVER (PARTITION BY track_id, depth ORDER BY ts, slice_id) AS prev"
        " FROM slices WHERE dur > 0) WHERE prev > ts").fetchone()[0]
    assert collide == 0
    # device busy: the union of each device's kernels, memsets and copies
    start, end = (int(_meta(con)[k]) for k in ("start_ns", "end_ns"))
    got = sorted(d["busy_ns"] for d in utilization.busy(con, start, end + 1)["devices"])
    assert got == sorted(raw.device_busy().values())
    # every device op's flow starts at its launching call, at that call's depth
    if len({s[0] for s in raw.slices}) == 1:
        want = raw.launches()
        rows = con.execute(
            "SELECT d.corr_id, d.name, d.dur, c.name, c.dur, c.depth FROM slices d"
            " JOIN flows f ON f.dst_slice = d.slice_id AND f.kind IN ('launch', 'exec', 'dma')"
            " JOIN slices c ON c.slice_id = f.src_slice WHERE d.corr_id IS NOT NULL AND f.raw_kind = 'correlation'"
        ).fetchall()
        have = {(corr, n, dur): (cn, cdur, cdepth) for corr, n, dur, cn, cdur, cdepth in rows}
        # the launching call itself (name and duration), at its nesting depth where its track nests properly
        assert {k: v[:2] for k, v in have.items()} == {k: v[:2] for k, v in want.items()}
        exact = raw.launch_depths_nested()
        assert {k: v for k, v in have.items() if k[0] in exact} == {k: v for k, v in want.items() if k[0] in exact}


def test_kernels_launched_deeper_than_48_levels_link_the_launch_call_itself(store, ingested, raws):
    path = SAMPLES / "chrome" / "kineto" / "xdit-sd35-diffusion.json.gz"
    raw = raws(path).launches()
    con = store.connect(ingested[_rel(path)].id)
    rows = con.execute(
        "SELECT d.corr_id, d.name, d.dur, c.name, c.dur, c.depth FROM slices d JOIN flows f ON f.dst_slice = d.slice_id"
        " JOIN slices c ON c.slice_id = f.src_slice WHERE f.kind = 'launch' AND c.depth > 48").fetchall()
    # 798 kernels whose hipLaunchKernel is drawn 49-53 rows down a Python stack: each flow starts at
    # the very call with the kernel's correlation id (same name and duration), not at an ancestor
    assert len(rows) >= 700
    assert {(a, b, c): (d, e) for a, b, c, d, e, _ in rows} == {k: raw[k][:2] for k in {(a, b, c) for a, b, c, *_ in rows}}
    assert all(d.endswith("LaunchKernel") for _, _, _, d, _, _ in rows)  # hip(Ext)(Module)LaunchKernel
    assert max(g for *_, g in rows) >= 53


def test_a_synthetic_launch_at_depth_60_is_the_flow_source(tmp_path):
    events = [{"ph": "X", "cat": "python_function", "name": f"frame {d}", "pid": 1, "tid": 1,
               "ts": 1000 + d, "dur": 1000 - 2 * d} for d in range(60)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1070,
                "dur": 5, "args": {"correlation": 7}},
               {"ph": "X", "cat": "kernel", "name": "deep_kernel", "pid": 0, "tid": 7, "ts": 1100, "dur": 50,
                "args": {"correlation": 7, "device": 0, "stream": 7}},
               {"ph": "X", "cat": "gpu_user_annotation", "name": "capture_1", "pid": 0, "tid": 7, "ts": 1090,
                "dur": 100},
               {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
                "ts": 1000, "dur": 1000}]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = Store(tmp_path / "store")
    (res,) = ingest_paths(store, [path])
    assert res.error is None, res.error
    con = store.connect(res.id)
    src = con.execute("SELECT c.name, c.depth FROM flows f JOIN slices c ON c.slice_id = f.src_slice"
                      " JOIN slices k ON k.slice_id = f.dst_slice WHERE k.name = 'deep_kernel'").fetchall()
    assert src == [("cudaLaunchKernel", 60)]
    lanes = dict(con.execute("SELECT s.name, t.lane FROM slices s JOIN tracks t USING (track_id)"
                             " WHERE s.name IN ('deep_kernel', 'capture_1', 'PyTorch Profiler (0)')").fetchall())
    assert lanes == {"deep_kernel": "eu", "capture_1": "annotation", "PyTorch Profiler (0)": "annotation"}
    # the kernel stays at depth 0 of its stream (the marker no longer sits on top of it)
    assert con.execute("SELECT depth FROM slices WHERE name = 'deep_kernel'").fetchone()[0] == 0
    assert [d["busy_ns"] for d in utilization.busy(con, 0, 1 << 62)["devices"]] == [50_000]


def test_kineto_memory_events_become_per_device_counter_tracks(store, ingested, raws):
    path = SAMPLES / "chrome" / "kineto" / "h100-qwen-chat-inference.json.gz"
    (doc,) = _docs(path)
    mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    con = store.connect(ingested[_rel(path)].id)
    rows = con.execute("SELECT t.name, t.device, t.unit, count(*), max(c.value) FROM counters c"
                       " JOIN tracks t USING (track_id) WHERE t.lane = 'counter' GROUP BY ALL ORDER BY 1, 2").fetchall()
    by_dev = defaultdict(list)
    for e in mem:
        by_dev[e["args"]["Device Id"]].append(e["args"])
    want = []
    for dev, args in sorted(by_dev.items()):
        owner = str(dev) if dev >= 0 else None  # -1: host memory, a process's track
        want.append(("memory allocated", owner, "B", len(args), float(max(a["Total Allocated"] for a in args))))
        want.append(("memory reserved", owner, "B", len(args), float(max(a["Total Reserved"] for a in args))))
    assert sorted(rows, key=repr) == sorted(want, key=repr)
    assert int(_meta(con)["chrome_memory_events"]) == len(mem)
    assert con.execute("SELECT count(*) FROM slices WHERE name = '[memory]'").fetchone()[0] == 0


def test_trace_info_facts_are_in_trace_meta(store, ingested):
    con = store.connect(ingested["chrome/kineto/b200-eager-rank0.json.gz"].id)
    meta = _meta(con)
    versions = json.loads(meta["versions"])
    assert {"cupti_version", "cuda_runtime_version", "cuda_driver_version"} <= set(versions)
    assert meta["profiler"].startswith("PyTorch profiler (Kineto)")
    props = json.loads(meta["device_properties"])
    assert props and all("name" in p for p in props)
    assert json.loads(meta["warnings"]) == [] and meta["warning_count"] == "0"


# -- Nsight Systems -----------------------------------------------------------------------------------
def _sql(path: Path, sql: str):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("path", NSYS, ids=_rel)
def test_nsys_sample_agrees_with_its_raw_file(store, ingested, path):
    res = ingested[_rel(path)]
    assert res.error is None, res.error
    con = store.connect(res.id)
    stored = dict(con.execute("SELECT t.lane || '/' || s.category, count(*) FROM slices s JOIN tracks t USING (track_id)"
                              " GROUP BY ALL").fetchall())
    (runtime,), = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 0")
    (driver,), = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 1")
    (nvtx,), = _sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60, 70, 71)")
    (kernels,), = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    (host_copies,), = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (1, 2, 3, 4, 10, 11, 12)")
    (samples,), = _sql(path, "SELECT count(*) FROM COMPOSITE_EVENTS")
    # scheduling: a slice from each sched-in to the thread's next event when that one is a sched-out
    sched = _sql(path, "SELECT globalTid, start, isSchedIn FROM SCHED_EVENTS ORDER BY globalTid, start, isSchedIn")
    runs = sum(1 for a, b in zip(sched, sched[1:] + [(None, None, None)])
               if a[2] and (b[0] != a[0] or not b[2]))
    assert stored == {"cpu/cuda_runtime": runtime, "driver/cuda_driver": driver, "annotation/user_annotation": nvtx,
                      "eu/kernel": kernels, "pcie/gpu_memcpy": host_copies, "cpu/cpu_sample": samples,
                      "cpu/sched": runs}
    # device busy: the union of kernels, copies and memsets per device
    ivs = _sql(path, 'SELECT deviceId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'
                     ' UNION ALL SELECT deviceId, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY'
                     ' UNION ALL SELECT deviceId, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMSET')
    per_dev = defaultdict(list)
    for dev, a, b in ivs:
        per_dev[str(dev)].append((a, b))
    meta = _meta(con)
    got = {d["device"]: d["busy_ns"] for d in utilization.busy(con, int(meta["start_ns"]), int(meta["end_ns"]) + 1)["devices"]}
    assert got == {d: _union(v) for d, v in per_dev.items()}
    # names: short kernel names as labels, mangled and demangled in args; API labels without _vNNNN
    (short, mangled), = _sql(path, "SELECT s.value, m.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s"
                                   " ON s.id = k.shortName JOIN StringIds m ON m.id = k.mangledName LIMIT 1")
    name, args = con.execute("SELECT name, args FROM slices WHERE category = 'kernel' LIMIT 1").fetchone()
    assert name == short and json.loads(args)["mangled name"] == mangled
    assert con.execute("SELECT count(*) FROM slices WHERE regexp_matches(name, '_v[0-9]+$')").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM slices WHERE json_extract_string(args, '$.\"full name\"')"
                       " LIKE 'cudaMalloc%\\_v%' ESCAPE '\\'").fetchone()[0] > 0
    # what the export lacks is named for the trace info
    absent = {(x["source"], x["state"]) for x in json.loads(meta["not_present"])}
    assert ("OSRT_API", "empty") in absent and ("CUPTI_ACTIVITY_KIND_DRIVER", "absent") in absent
    assert "NvDriverVersion" in json.loads(meta["versions"]) and json.loads(meta["device_properties"])[0]["name"]


# -- the rest -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", OTHER, ids=_rel)
def test_native_sample_opens(store, ingested, path):
    res = ingested[_rel(path)]
    assert res.error is None, res.error
    assert res.counts["slices"] + res.counts["counters"] > 0


def test_the_files_other_top_level_facts_are_kept(store, ingested):
    path = SAMPLES / "chrome" / "kineto" / "h100-qwen-chat-inference.json.gz"
    (doc,) = _docs(path)
    meta = _meta(store.connect(ingested[_rel(path)].id))
    extra = json.loads(meta["chrome_extra"], parse_float=Decimal)
    assert extra["metadata"] == doc["metadata"]  # the 26 KB harness object, whole
