"""Write a small Nsight Systems SQLite export in the 3.x layout (Nsight 2023+), for tests and benchmarks.

Column sets follow the 3.x schema reference (META_DATA_EXPORT instead of EXPORT_META_DATA,
ENUM_* tables, no MEMCPY.name, GPU_METRICS + TARGET_INFO_GPU_METRICS). Each iteration is
an NVTX push/pop range around: cudaMemcpyAsync (pinned HtoD copy), cudaLaunchKernel
(kernel), cudaMemsetAsync (memset), a DtoD copy, and a cuLaunchKernel called directly
through the driver API (driver call -> kernel). The numbers it writes are known, so tests
can check every count.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SESSION_START_UTC_NS = 1_700_000_000_123_456_789
PID, TID = 4242, 4243
GLOBAL_PID = (PID << 24)  # Nsight's serialized global id (hardware/vm bits zero)
GLOBAL_TID = GLOBAL_PID | TID
STREAM = 13
ITER_NS = 100_000

_SCHEMA = """
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT);
CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL,
    mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL,
    gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
    deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER,
    dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER,
    virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
    graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
    uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL,
    typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL);
CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL,
    value INTEGER NOT NULL);
"""

_STRINGS = {1: "cudaLaunchKernel_v7000", 2: "cudaMemcpyAsync_v3020", 3: "cudaMemsetAsync_v3020",
            4: "cuLaunchKernel", 5: "void gemm<float>(float const*, float*, int)", 6: "gemm",
            7: "_Z4gemmIfEvPKfPfi", 8: "step", 9: "main", 10: "cudaMemcpyAsync_v3020"}
_METRICS = [(0, "PCIe RX Throughput [Throughput %]"), (1, "PCIe TX Throughput [Throughput %]"),
            (2, "GPC Clock Frequency [MHz]")]


def write(path: Path, iterations: int = 10, metric_samples: int = 20, page_size: int | None = None) -> dict:
    """Write the export; returns the counts a correct ingest must find."""
    path = Path(path)
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    if page_size:
        db.execute(f"PRAGMA page_size = {int(page_size)}")
    db.executescript(_SCHEMA)
    db.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_SCHEMA_VERSION", "3.11.1"), ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
        ("NSIGHT_SYSTEMS_VERSION", "2024.2.1.106")])
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", _STRINGS.items())
    db.execute("INSERT INTO ThreadNames VALUES (9, 0, ?)", (GLOBAL_TID,))
    db.execute("INSERT INTO PROCESSES VALUES (?, ?, '/opt/app/train')", (GLOBAL_PID, PID))
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (SESSION_START_UTC_NS,))
    db.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H100 80GB HBM3', '0000:1b:00.0')")
    db.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?, ?, ?)", [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"), (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (67, "TRACE_PROCESS_EVENT_CUDABACKTRACE", "CUDA backtrace")])
    db.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")])
    db.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)",
                   [(1, 0, "GH100", mid, name) for mid, name in _METRICS])
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _runtime(iterations))
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId,"
                   " correlationId, globalPid, demangledName, shortName, mangledName, registersPerThread, gridX,"
                   " gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,"
                   " localMemoryPerThread, localMemoryTotal, gridId)"
                   " VALUES (?, ?, 0, 1, ?, ?, ?, 5, 6, 7, 32, 128, 1, 1, 256, 1, 1, 0, 4096, 0, 0, ?)",
                   _kernels(iterations))
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId,"
                   " correlationId, globalPid, bytes, copyKind, srcKind, dstKind)"
                   " VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, ?, ?)", _copies(iterations))
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId,"
                   " correlationId, globalPid, value, bytes, memKind) VALUES (?, ?, 0, 1, ?, ?, ?, 0, ?, 2)",
                   ((i * ITER_NS + 30_000, i * ITER_NS + 31_000, STREAM, 10 * i + 3, GLOBAL_PID, 1 << 20)
                    for i in range(iterations)))
    db.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId)"
                   " VALUES (?, ?, 59, NULL, ?, 8, 0)",
                   ((i * ITER_NS + 500, i * ITER_NS + 60_000, GLOBAL_TID) for i in range(iterations)))
    step = max(1, iterations * ITER_NS // max(1, metric_samples))
    db.executemany("INSERT INTO GPU_METRICS VALUES (?, 1, ?, ?)",
                   ((j * step, mid, (j * 7 + mid) % 100) for j in range(metric_samples) for mid, _ in _METRICS))
    db.commit()
    db.close()
    return {
        "runtime_calls": 3 * iterations, "driver_calls": iterations, "backtrace_records": iterations,
        "kernels": 2 * iterations, "h2d": iterations, "d2d": iterations, "memsets": iterations,
        "nvtx_ranges": iterations, "metric_tracks": len(_METRICS), "metric_samples": metric_samples * len(_METRICS),
    }


def add_nested_driver_launch(path: Path) -> None:
    """Add a cuLaunchKernel (driver) inside the first cudaLaunchKernel, recorded with the runtime
    call's correlation id 2, as CUDA does for a runtime launch: a submit -> exec chain."""
    db = sqlite3.connect(path)
    try:
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5500, 8500, 1, ?, 2, 4, 0, NULL)", (GLOBAL_TID,))
        db.commit()
    finally:
        db.close()


def _runtime(n: int):
    for i in range(n):
        t = i * ITER_NS
        yield (t + 1_000, t + 4_000, 0, GLOBAL_TID, 10 * i + 1, 2, 0, None)      # cudaMemcpyAsync -> HtoD copy
        yield (t + 900, t + 4_100, 67, GLOBAL_TID, 10 * i + 1, 10, 0, i + 1)     # its backtrace record
        yield (t + 5_000, t + 9_000, 0, GLOBAL_TID, 10 * i + 2, 1, 0, None)      # cudaLaunchKernel -> kernel
        yield (t + 10_000, t + 12_000, 0, GLOBAL_TID, 10 * i + 3, 3, 0, None)    # cudaMemsetAsync -> memset
        yield (t + 13_000, t + 15_000, 1, GLOBAL_TID, 10 * i + 4, 4, 0, None)    # cuLaunchKernel -> kernel


def _kernels(n: int):
    for i in range(n):
        t = i * ITER_NS
        yield (t + 20_000, t + 29_000, STREAM, 10 * i + 2, GLOBAL_PID, 2 * i)
        yield (t + 40_000, t + 45_000, STREAM, 10 * i + 4, GLOBAL_PID, 2 * i + 1)


def _copies(n: int):
    for i in range(n):
        t = i * ITER_NS
        yield (t + 4_500, t + 14_500, STREAM, 10 * i + 1, GLOBAL_PID, 8 << 20, 1, 1, 2)    # HtoD pinned
        yield (t + 50_000, t + 52_000, STREAM, None, GLOBAL_PID, 4 << 20, 8, 2, 2)         # DtoD, no API call


def write_invalid(directory: Path) -> list[Path]:
    """Small broken exports, each with one defect, for the refusal tests (sample_traces/nsys/invalid/)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = []

    def variant(name: str, sql: list[str], params: tuple = ()) -> None:
        path = directory / name
        write(path, iterations=1, metric_samples=0, page_size=512)
        db = sqlite3.connect(path)
        for stmt in sql:
            db.execute(stmt, params) if "?" in stmt else db.execute(stmt)
        db.commit()
        db.execute("VACUUM")
        db.close()
        out.append(path)

    variant("missing-column.sqlite", ["ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN copyKind"])
    variant("no-string-table.sqlite", ["DROP TABLE StringIds"])
    variant("wrong-type.sqlite", ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 2"])
    notes = directory / "not-nsight.sqlite"
    notes.unlink(missing_ok=True)
    db = sqlite3.connect(notes)
    db.execute("PRAGMA page_size = 512")
    db.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    db.execute("INSERT INTO notes VALUES (1, 'not a profile')")
    db.commit()
    db.close()
    out.append(notes)
    whole = (directory / "wrong-type.sqlite").read_bytes()
    cut = directory / "truncated.sqlite"
    cut.write_bytes(whole[: len(whole) // 3])
    out.append(cut)
    return out
