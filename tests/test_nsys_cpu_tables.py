"""Nsight's CPU-side tables (OS runtime calls, scheduling, CPU samples) on a synthetic 3.x export,
the annotation lane for NVTX, and trace_meta not_present (issue 13 "Data not yet read")."""

import json
import sqlite3

import nsys_synth
from _helpers import ingest_ok

TID = nsys_synth.GLOBAL_TID
OFF = nsys_synth.SESSION_START_UTC_NS


def _add_cpu_tables(path):
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(900, "pthread_cond_wait"), (901, "ioctl"),
                                                         (902, "memcpy"), (903, "libc.so.6"), (904, "main"),
                                                         (905, "/opt/app/train")])
    db.execute("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,"
               " globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER,"
               " callchainId INTEGER)")
    db.executemany("INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, NULL)",
                   [(100, 900, TID, 900), (2_000, 2_500, TID, 901)])
    db.execute("CREATE TABLE SCHED_EVENTS (start INTEGER NOT NULL, cpu INTEGER NOT NULL, isSchedIn INTEGER NOT NULL,"
               " globalTid INTEGER)")
    # on CPU 3 [50, 700), on CPU 5 [800, 1200), then a second sched-in without a sched-out before it,
    # and a last run on CPU 1 from 1500 that never ends in the report
    db.executemany("INSERT INTO SCHED_EVENTS VALUES (?, ?, ?, ?)", [
        (50, 3, 1, TID), (700, 3, 0, TID), (800, 5, 1, TID), (1_200, 5, 0, TID), (1_300, 2, 1, TID),
        (1_500, 1, 1, TID)])
    db.execute("CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, cpu INTEGER,"
               " threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER)")
    db.executemany("INSERT INTO COMPOSITE_EVENTS VALUES (?, ?, 3, 1, ?, 0)", [(1, 300, TID), (2, 600, TID)])
    db.execute("CREATE TABLE SAMPLING_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL, module INTEGER NOT NULL,"
               " kernelMode INTEGER, thumbCode INTEGER, unresolved INTEGER, specialEntry INTEGER, originalIP INTEGER,"
               " unwindMethod INTEGER, stackDepth INTEGER NOT NULL)")
    db.executemany("INSERT INTO SAMPLING_CALLCHAINS VALUES (?, ?, ?, 0, 0, 0, 0, 0, 0, ?)",
                   [(1, 902, 903, 0), (1, 904, 905, 1), (2, 904, 905, 0)])
    db.commit()
    db.close()


def test_os_runtime_calls_scheduling_and_samples_become_cpu_tracks(tmp_path):
    path = tmp_path / "cpu.sqlite"
    nsys_synth.write(path, iterations=2, metric_samples=0)
    _add_cpu_tables(path)
    store, res = ingest_ok(tmp_path, path)
    con = store.connect(res.id)
    rows = con.execute("SELECT t.lane, t.name, s.category, s.name, s.ts - ?, s.dur, s.args FROM slices s"
                       " JOIN tracks t USING (track_id) WHERE s.category IN ('osrt', 'sched', 'cpu_sample')"
                       " ORDER BY s.category, s.ts", [OFF]).fetchall()
    thread = con.execute("SELECT name FROM tracks WHERE lane = 'cpu' AND thread IS NOT NULL ORDER BY sort_key"
                         " LIMIT 1").fetchone()[0]
    got = [(lane, name, cat, n, ts, dur) for lane, name, cat, n, ts, dur, _ in rows]
    end = con.execute("SELECT max(ts + dur) - ? FROM slices WHERE category <> 'sched'", [OFF]).fetchone()[0]
    assert got == [
        ("cpu", f"{thread} samples", "cpu_sample", "memcpy", 300, 0),
        ("cpu", f"{thread} samples", "cpu_sample", "main", 600, 0),
        ("cpu", f"{thread} OS runtime", "osrt", "pthread_cond_wait", 100, 800),
        ("cpu", f"{thread} OS runtime", "osrt", "ioctl", 2_000, 500),
        ("cpu", f"{thread} scheduling", "sched", "on CPU 3", 50, 650),
        ("cpu", f"{thread} scheduling", "sched", "on CPU 5", 800, 400),
        ("cpu", f"{thread} scheduling", "sched", "on CPU 1", 1_500, end - 1_500),
    ]
    stack = json.loads(rows[0][6])["stack"]
    assert stack == ["memcpy (libc.so.6)", "main (/opt/app/train)"]  # leaf first
    assert json.loads(rows[-1][6]).get("open") is True
    meta = dict(con.execute("SELECT key, value FROM trace_meta").fetchall())
    assert int(meta["dropped_events"]) >= 1  # the sched-in followed by another sched-in, counted
    warnings = " ".join(json.loads(meta["warnings"]))
    assert "1 sched-in events followed by another sched-in" in warnings
    absent = {x["source"]: x["state"] for x in json.loads(meta["not_present"])}
    assert "OSRT_API" not in absent and "SCHED_EVENTS" not in absent and absent.get("CUPTI_ACTIVITY_KIND_DRIVER") == "absent"
    # NVTX ranges are annotations: the thread's CUDA calls stay at depth 0 of its cpu track
    assert con.execute("SELECT DISTINCT t.lane FROM slices s JOIN tracks t USING (track_id)"
                       " WHERE s.category = 'user_annotation'").fetchall() == [("annotation",)]
    assert con.execute("SELECT max(depth) FROM slices WHERE category = 'cuda_runtime'").fetchone()[0] == 0


def test_a_cpu_table_of_another_layout_is_named_not_guessed(tmp_path):
    path = tmp_path / "odd.sqlite"
    nsys_synth.write(path, iterations=1, metric_samples=0)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE SCHED_EVENTS (start INTEGER, core INTEGER, isSchedIn INTEGER, globalTid INTEGER)")
    db.execute("INSERT INTO SCHED_EVENTS VALUES (1, 2, 1, 3)")
    db.commit()
    db.close()
    store, res = ingest_ok(tmp_path, path)
    meta = dict(store.connect(res.id).execute("SELECT key, value FROM trace_meta").fetchall())
    assert {"source": "SCHED_EVENTS", "gives": "thread scheduling", "state": "unreadable"} in json.loads(
        meta["not_present"])
    assert any("table SCHED_EVENTS lacks column(s) cpu" in w for w in json.loads(meta["warnings"]))
