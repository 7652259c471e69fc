"""Fleet analysis on Dask (docs/fleet.md): device-model fleets, a LocalCluster of 2 workers, a real
`dask scheduler` + `dask worker` pair on loopback, the fleet tables, the JSON contract, the page.

Seeds 4242 and 9001 were chosen before the detector was run on them (it was developed on 1-14).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from acceltrace.fleet import query
from acceltrace.fleet.build import build_fleet
from acceltrace.store.catalog import Store
from acceltrace.store.sandbox import QueryError

ROOT = Path(__file__).resolve().parent.parent
INVALID = ROOT / "sample_traces" / "atrace" / "invalid" / "newer-major-version.atrace"
EVENTS = 4000  # per rank: small traces keep the fleet fast; the model's coupling is the same
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CONTRACT_TRACE_KEYS = {"trace_id", "name", "tags", "step_ns_median", "device_busy", "outlier", "outlier_metrics"}
COMPARED = ["trace_id", "name", "status", "error", "tags", "step_ns_median", "step_work_ns_median", "device_busy",
            "host_busy", "h2d_gbps", "pageable_frac", "kernel_time_ratio", "outlier", "outlier_metrics", "cause"]

pytestmark = pytest.mark.timeout(240)


def _sim_fleet(out: Path, ranks: int, seed: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "acceltrace", "sim", "fleet", "--ranks", str(ranks), "--out", str(out),
                        "--seed", str(seed), "--events", str(EVENTS)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "fleet_truth.json").read_text())


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import Client, LocalCluster

    lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(lc)
    yield client
    client.close()
    lc.close()


@pytest.fixture(scope="module")
def fleet_a(tmp_path_factory, cluster):
    """10 ranks of seed 4242 plus one damaged trace, built on the LocalCluster."""
    base = tmp_path_factory.mktemp("fleet-a")
    truth = _sim_fleet(base / "job", 10, 4242)
    bad = base / "broken" / "rank_bad.atrace"
    bad.parent.mkdir()
    shutil.copy(INVALID, bad)
    store = Store(base / "store")
    res = build_fleet(store, [str(base / "job"), str(bad)], name="a", client=cluster)
    return {"store": store, "res": res, "truth": truth, "base": base,
            "report": query.report(store, res.fleet["id"], full=True)}


def _found(report) -> dict[int, str]:
    return {int(t["tags"]["rank"]): t["cause"] for t in report["traces"] if t["outlier"]}


def test_slow_ranks_are_found_with_their_cause(fleet_a):
    truth = {s["rank"]: s["cause"] for s in fleet_a["truth"]["slow_ranks"]}
    assert truth, "the seed drew no slow rank"
    assert _found(fleet_a["report"]) == truth  # precision and recall 1.0, cause named


def test_slow_ranks_make_the_others_wait(fleet_a):
    """Coupled by the all-reduce: every rank's step is about as long; the slow ones spend less of it communicating."""
    traces = [t for t in fleet_a["report"]["traces"] if t["status"] == "ok"]
    steps = [t["step_ns_median"] for t in traces]
    assert max(steps) / min(steps) < 1.05
    slow = {s["rank"] for s in fleet_a["truth"]["slow_ranks"]}
    comm_slow = max(t["comm_frac"] for t in traces if int(t["tags"]["rank"]) in slow)
    comm_fast = min(t["comm_frac"] for t in traces if int(t["tags"]["rank"]) not in slow)
    assert comm_slow < comm_fast
    stragglers = {s["rank"] for s in fleet_a["report"]["stragglers"]}
    assert stragglers == slow and all(s["excess_ns"] > 0 for s in fleet_a["report"]["stragglers"])


def test_a_trace_that_fails_to_ingest_is_marked_failed_and_the_fleet_finishes(fleet_a):
    rep = fleet_a["report"]
    failed = [t for t in rep["traces"] if t["status"] != "ok"]
    assert [Path(t["path"]).name for t in failed] == ["rank_bad.atrace"]
    assert "rank_bad.atrace" in failed[0]["error"] and failed[0]["outlier"] is False
    assert rep["counts"] == {"traces": 11, "ok": 10, "failed": 1, "outliers": len(fleet_a["truth"]["slow_ranks"])}
    assert [f["path"] for f in fleet_a["res"].failed] == [failed[0]["path"]]


def test_nothing_is_skipped_silently(fleet_a):
    """Every run directory is a row; the generator's answer key is listed as skipped, never read."""
    rep = fleet_a["report"]
    ranks = sorted(int(t["tags"]["rank"]) for t in rep["traces"] if t["status"] == "ok")
    assert ranks == list(range(10))
    assert rep["skipped"] == [str((fleet_a["base"] / "job" / "fleet_truth.json").resolve())]


def test_json_contract_keys(fleet_a):
    rep = fleet_a["report"]
    assert {"fleet", "traces", "findings"} <= set(rep)
    for t in rep["traces"]:
        assert CONTRACT_TRACE_KEYS <= set(t)
        assert isinstance(t["outlier"], bool) and isinstance(t["outlier_metrics"], list)
    ok = [t for t in rep["traces"] if t["status"] == "ok"]
    assert all({"job", "rank", "host"} <= set(t["tags"]) for t in ok)
    assert rep["findings"] and all({"pass", "traces", "impact_ns"} <= set(f) for f in rep["findings"])
    impacts = [f["impact_ns"] for f in rep["findings"]]
    assert impacts == sorted(impacts, reverse=True)
    assert rep["traces"][0]["outlier"]  # outliers first


def test_fleet_query_is_read_only(fleet_a, tmp_path):
    fid = fleet_a["res"].fleet["id"]
    cols, rows, _ = query.run_readonly(fleet_a["store"], fid, "SELECT count(*) FROM steps")
    assert rows[0][0] > 10 * 5
    for bad in ("CREATE TABLE x AS SELECT 1", f"SELECT * FROM read_csv('{ROOT / 'README.md'}')",
                f"COPY traces TO '{tmp_path / 'out.csv'}'", "INSTALL httpfs", "SET enable_external_access = true"):
        with pytest.raises(QueryError):
            query.run_readonly(fleet_a["store"], fid, bad)
    assert not (tmp_path / "out.csv").exists()


def test_rebuild_reads_no_trace_again(fleet_a, cluster):
    """The store is the cache: a second build of the same inputs re-ingests nothing."""
    store = fleet_a["store"]
    res = build_fleet(store, [str(fleet_a["base"] / "job")], name="a", client=cluster)
    assert res.fleet["id"] == fleet_a["res"].fleet["id"] and res.fleet["builds"] == 2
    cols, rows, _ = query.run_readonly(store, res.fleet["id"],
                                       "SELECT count(*), count(*) FILTER (WHERE ingested) FROM traces WHERE build = 2")
    assert rows[0] == (10, 0)


def _scheduler_address(sched_file: Path, timeout_s: float = 60.0) -> str:
    """The address in the scheduler file once the scheduler has written all of it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return json.loads(sched_file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    raise AssertionError(f"the dask scheduler wrote no address to {sched_file} within {timeout_s} s")


def test_real_scheduler_and_workers_give_the_same_results(fleet_a, tmp_path):
    """`dask scheduler` and two `dask worker` processes on loopback: the cluster code path."""
    from acceltrace.fleet import layout

    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen(dask + ["--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                      "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        address = _scheduler_address(sched_file)
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                           "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                           "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from dask.distributed import Client

        with Client(address, timeout="30s") as c:
            c.wait_for_workers(2, timeout=60)
            workers = {w["host"] for w in c.scheduler_info()["workers"].values()}
        assert workers == {"127.0.0.1"}
        store = fleet_a["store"]
        inputs = [str(fleet_a["base"] / "job"), str(fleet_a["base"] / "broken" / "rank_bad.atrace")]
        res = build_fleet(store, inputs, name="on-a-cluster", scheduler=address)
        rep = query.report(store, res.fleet["id"])
        _, rows, _ = query.run_readonly(store, res.fleet["id"], "SELECT DISTINCT worker FROM traces")
        assert len({w for (w,) in rows}) == 2  # both worker processes mapped traces
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    assert res.fleet["id"] != fleet_a["res"].fleet["id"]
    assert layout.resolve(store, "on-a-cluster")["id"] == res.fleet["id"]

    def view(r):
        return sorted(({k: t.get(k) for k in COMPARED} for t in r["traces"]), key=lambda t: t["name"])

    assert view(rep) == view(fleet_a["report"])
    assert rep["findings"] == fleet_a["report"]["findings"]


def test_cli_builds_prints_the_contract_and_queries(fleet_a):
    """`acceltrace fleet ... --json` as a user runs it (a LocalCluster of its own), then `fleet query`."""
    store = str(fleet_a["store"].root)
    job = str(fleet_a["base"] / "job")
    r = subprocess.run([sys.executable, "-m", "acceltrace", "--store", store, "fleet", job, "--name", "cli",
                        "--workers", "1", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert {"fleet", "traces", "findings"} <= set(out) and len(out["traces"]) == 10
    assert all(CONTRACT_TRACE_KEYS <= set(t) for t in out["traces"])
    assert {int(t["tags"]["rank"]) for t in out["traces"] if t["outlier"]} == \
        {s["rank"] for s in fleet_a["truth"]["slow_ranks"]}
    q = subprocess.run([sys.executable, "-m", "acceltrace", "--store", store, "fleet", "query", "cli",
                        "SELECT rank, cause FROM outliers ORDER BY rank", "--format", "json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    got = json.loads(q.stdout)
    assert got["columns"] == ["rank", "cause"]
    assert [tuple(row) for row in got["rows"]] == sorted((s["rank"], s["cause"]) for s in fleet_a["truth"]["slow_ranks"])
    bad = subprocess.run([sys.executable, "-m", "acceltrace", "--store", store, "fleet", "query", "no-such-fleet",
                          "SELECT 1"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no fleet 'no-such-fleet'" in bad.stderr and "Traceback" not in bad.stderr


def test_second_unseen_seed(tmp_path, cluster):
    truth = _sim_fleet(tmp_path / "job", 12, 9001)
    store = Store(tmp_path / "store")
    res = build_fleet(store, [str(tmp_path / "job")], client=cluster)
    assert _found(query.report(store, res.fleet["id"])) == {s["rank"]: s["cause"] for s in truth["slow_ranks"]}


def test_fleet_page_in_chromium(fleet_a, live_server_factory, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    live = live_server_factory(fleet_a["store"].root)
    fid = fleet_a["res"].fleet["id"]
    with urllib.request.urlopen(f"{live.url}/api/fleets/{fid}", timeout=20) as r:
        api = json.loads(r.read())
    assert api["fleet"] == fid and api["step_hist"]["counts"]
    with urllib.request.urlopen(f"{live.url}/api/fleets", timeout=20) as r:
        assert fid in {f["id"] for f in json.loads(r.read())["fleets"]}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{live.url}/api/fleets/AAAAAAAAAAAAAAAAAAAAAAA", timeout=20)
    assert e.value.code == 404 and json.loads(e.value.read())["error"]["code"] == "not_found"
    slow = {s["rank"] for s in fleet_a["truth"]["slow_ranks"]}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            pg = b.new_page(viewport={"width": 1500, "height": 900})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(f"{live.url}/fleet/{fid}")
            pg.wait_for_selector("body[data-ready='1']", timeout=20_000)
            out = ROOT / "test-output" / "ui"
            out.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(out / "fleet.png"), full_page=True)
            rows = pg.locator("#ranks tbody tr")
            assert rows.count() == 11
            first = [int(rows.nth(i).locator("td").nth(1).inner_text()) for i in range(len(slow))]
            assert set(first) == slow  # outliers first
            assert rows.nth(0).get_attribute("class").split()[0] == "outlier"
            link = rows.nth(0).locator("td").nth(2).locator("a")
            assert link.get_attribute("href") == f"/t/{api['traces'][0]['trace_id']}"
            heated = pg.evaluate("""() => [...document.querySelectorAll('#ranks tbody tr.outlier td.num')]
                                    .filter((td) => td.style.background.startsWith('rgba(220')).length""")
            assert heated >= len(slow)
            # sort by rank, ascending: the table reorders
            pg.locator("#ranks thead th[data-key='rank']").click()
            pg.locator("#ranks thead th[data-key='rank']").click()
            ranks = [rows.nth(i).locator("td").nth(1).inner_text() for i in range(10)]
            assert ranks == [str(i) for i in range(10)]
            assert errors == []
            # two ticks open the comparison view (its page is the comparison's own; its errors are not ours)
            pg.locator("#ranks input.pick").nth(0).check()
            pg.locator("#ranks input.pick").nth(1).check()
            assert pg.locator("#compare").is_enabled()
            with pg.expect_navigation():
                pg.locator("#compare").click()
            assert "/diff?a=" in pg.url and "&b=" in pg.url
        finally:
            b.close()


def _rows(n: int, job: str, step_work, pageable=None) -> list[dict]:
    pageable = pageable or [0.0] * n
    return [{"path": f"/x/{job}/{i}", "name": f"r{i}", "trace_id": f"{job}-{i}", "status": "ok",
             "tags": {"job": job, "rank": str(i)}, "step_work_ns_median": float(step_work[i]),
             "step_ns_median": 1e7, "pageable_frac": pageable[i], "steps": 10} for i in range(n)]


def test_robust_outliers_need_both_the_mad_score_and_the_floor(tmp_path):
    """Ranks agreeing to within jitter (MAD ~ 0) do not flag each other; a job of two ranks flags nothing;
    a rank past the floor and the MAD score is an outlier on that metric, with the cause it names."""
    from acceltrace.fleet.reduce import reduce_fleet
    from acceltrace.fleet.results import ResultWriter

    w = ResultWriter(tmp_path, 1)
    jitter = [1e7, 1e7 + 1, 1e7 - 1, 1e7 + 2, 1.03e7]  # the last is 3 % off: under the 10 % floor
    for row in (_rows(5, "calm", jitter) + _rows(2, "pair", [1e7, 5e7])
                + _rows(6, "one-bad", [1e7] * 6, pageable=[0, 0, 0, 0, 0, 1.0])):
        w.write(row)
    w.close()
    reduce_fleet(tmp_path, tmp_path / "fleet.duckdb", {"id": "x"})
    import duckdb

    con = duckdb.connect(str(tmp_path / "fleet.duckdb"), read_only=True)
    got = con.execute("SELECT trace_id, metrics, cause FROM outliers ORDER BY 1").fetchall()
    con.close()
    assert got == [("one-bad-5", ["pageable_frac"], "pageable")]


def test_sim_fleet_slow_ranks_are_late_and_every_rank_is_tagged(tmp_path):
    truth = _sim_fleet(tmp_path, 6, 77)
    assert set(truth) >= {"slow_ranks", "job", "ranks"} and truth["ranks"] == 6
    for s in truth["slow_ranks"]:
        assert s["cause"] in ("link_degraded", "throttled", "pageable", "noisy_neighbour")
        assert s["late_ns_median"] > 0.1 * truth["arrival_ns_median"]  # slow: the others wait for it
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert dirs == [f"rank_{i:05d}" for i in range(6)]
    assert all((tmp_path / d / "run.atrace").exists() and (tmp_path / d / "ground_truth.json").exists() for d in dirs)
