"""copy_compute_serialization's chain rule, its SQL against a plain Python statement of the rule.

The pass's windows work on positions in each queue (analysis/copy_compute_serialization.sql); these
random queues (ties in time, zero-length items, gaps on both sides of serial_max_gap_ns, several
queues) check that the SQL keeps exactly the copies the rule names, and nothing else."""

import random

import duckdb
import pyarrow as pa

from acceltrace.analysis import params as P
from acceltrace.analysis import runner

VALUES = P.resolve(None)
GAP = int(VALUES["serial_max_gap_ns"])
WAIT = int(VALUES["serial_min_wait_ns"])
COLUMNS = ("slice_id BIGINT, track_id BIGINT, dev VARCHAR, lane VARCHAR, ts BIGINT, end_ns BIGINT, dur BIGINT,"
           " bytes BIGINT, direction VARCHAR, ready_ns BIGINT, queue_key VARCHAR")
NAMES = [c.split()[0] for c in COLUMNS.split(", ")]


def serial_rows_statement(con):
    path = runner.SQL_DIR / "copy_compute_serialization.sql"
    text = runner.substitute(path.read_text(), VALUES, path.name)
    [stmt] = [s.query for s in con.extract_statements(text) if "TABLE _serial_rows AS" in s.query]
    return stmt


def by_the_rule(rows):
    """The copies the pass names: on one queue, ordered by (ts, slice_id), a chain runs while each item
    starts at most GAP after the previous one ended; a copy inside a chain with a kernel before it and one
    after it, and (host-to-device) submitted at least WAIT before it started."""
    kept = set()
    for queue in {r[10] for r in rows}:
        items = sorted((r for r in rows if r[10] == queue), key=lambda r: (r[4], r[0]))
        chain = 0
        chains = []
        for i, r in enumerate(items):
            if i == 0 or r[4] - items[i - 1][5] > GAP:
                chain += 1
            chains.append(chain)
        for i, r in enumerate(items):
            if r[3] != "pcie" or i == 0 or chains[i] != chains[i - 1]:
                continue
            same = [j for j in range(len(items)) if chains[j] == chains[i] and items[j][3] == "eu"]
            if any(j < i for j in same) and any(j > i for j in same):
                if r[8] != "h2d" or r[4] - r[9] >= WAIT:
                    kept.add(r[0])
    return kept


def random_queues(rng):
    rows, slice_id = [], 0
    for q in range(rng.randint(1, 4)):
        t = 0
        for _ in range(rng.randint(1, 50)):
            slice_id += rng.randint(1, 3)
            t += rng.choice([0, 0, 1, GAP // 2, GAP, GAP + 1, 3 * GAP])
            dur = rng.choice([0, 1, GAP // 3, GAP])
            ready = t - rng.choice([0, WAIT - 1, WAIT, 2 * WAIT])
            rows.append((slice_id, 1, "0", rng.choice(["eu", "eu", "pcie"]), t, t + dur, dur, 1 << 20,
                         rng.choice(["h2d", "d2h"]), ready, f"queue:{q}"))
            t += rng.choice([0, dur, dur])
    rng.shuffle(rows)
    return rows


def test_the_pass_keeps_the_copies_the_rule_names_on_random_queues():
    con = duckdb.connect()
    stmt = serial_rows_statement(con)
    kept_in_all = 0
    for seed in range(150):
        rows = random_queues(random.Random(seed))
        work = pa.table({name: list(col) for name, col in zip(NAMES, zip(*rows))})  # noqa: F841 (read by name)
        con.execute(f"CREATE OR REPLACE TEMP TABLE _work ({COLUMNS})")
        con.execute("INSERT INTO _work SELECT * FROM work")
        # what the pass's earlier statements make of a trace: the device work, and its queues' items
        con.execute("CREATE OR REPLACE TEMP TABLE _dev_work AS SELECT * EXCLUDE (ready_ns, queue_key) FROM _work")
        con.execute("CREATE OR REPLACE TEMP TABLE _queued_work AS SELECT slice_id, lane = 'eu' AS eu, ts, end_ns,"
                    " ready_ns, queue_key FROM _work")
        con.execute("CREATE OR REPLACE TEMP TABLE _mixed_queues AS SELECT DISTINCT queue_key FROM _work")
        con.execute(stmt)
        got = [r[0] for r in con.execute("SELECT slice_id FROM _serial_rows").fetchall()]
        assert sorted(got) == sorted(by_the_rule(rows)), f"seed {seed}"
        kept_in_all += len(got)
    assert kept_in_all > 300  # the random queues exercise the rule, not only its empty answer
