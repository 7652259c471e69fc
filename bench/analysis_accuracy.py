"""How well the analysis passes find and size the problems the device model injects.

For every scenario (clean, each single-issue scenario, mixed) and several seeds: simulate
(`acceltrace sim`), ingest the run directory (which runs the passes), and compare the
findings with ground_truth.json. A finding matches a truth entry when their kinds are
equal, their time ranges overlap and at least half of the finding's time lies inside the
truth's range. Reported findings are those of severity warning or error (info findings are
counted apart: they are the passes saying "seen, but not worth fixing"). Prints precision,
recall and the relative error of the summed impact per kind against the truth's
counterfactual impact_ns, then the real-trace check: every pageable copy of the A100 Kineto
trace flagged, no pinned one.

Two estimates per kind: the summed exclusive shares (`exclusive_ns`, the critical-path breakdown
that never counts a nanosecond twice) and the what-if (`analysis_status.impact_ns`: the replay's
saving with all the pass's findings fixed, issue 18). In the mixed scenario each pass's what-if is
compared with the truth's single-issue counterfactual, and the run's all-fixed saving (the `whatif`
side table) with the model re-run without any of its issues (`--all-fixed`, a second model run).

    python bench/analysis_accuracy.py                       # seeds 1-3
    python bench/analysis_accuracy.py --seeds 11 12 13 14 15 --scenarios pageable-memory mixed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from acceltrace.analysis.runner import after_publish  # noqa: E402
from acceltrace.ingest.pipeline import ingest_paths  # noqa: E402
from acceltrace.store.catalog import Store  # noqa: E402

SCENARIOS = ("clean", "pageable-memory", "small-transfers", "pcie-saturation", "strided-access",
             "copy-compute-serialization", "launch-gaps", "sync-stalls", "redundant-transfers", "mixed")
REPORTED = ("warning", "error")
A100 = ROOT / "sample_traces" / "chrome" / "kineto" / "a100-rank0-memcpy.json.gz"


def simulate(scenario: str, seed: int, out: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "acceltrace", "sim", scenario, "--out", str(out), "--seed", str(seed)],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"sim {scenario} --seed {seed} failed: {r.stderr.strip()[-500:]}")
    return json.loads((out / "ground_truth.json").read_text())


def overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def matches(f: dict, t: dict) -> bool:
    if f["pass"] != t["kind"]:
        return False
    f0, f1 = f["ts"], f["ts"] + max(f["dur"] or 0, 0)
    if f1 == f0:  # an instant: inside the range
        return t["start_ns"] <= f0 <= t["end_ns"]
    inside = overlap(f0, f1, t["start_ns"], t["end_ns"])
    return inside > 0 and 2 * inside >= (f1 - f0)


def score_run(findings: list[dict], truth: dict, whatif: dict | None = None, all_fixed: int | None = None) -> dict:
    reported = [f for f in findings if f["severity"] in REPORTED]
    issues = truth["issues"]
    matched_f = [f for f in reported if any(matches(f, t) for t in issues)]
    found_t = [t for t in issues if any(matches(f, t) for f in reported)]
    est, true = defaultdict(int), defaultdict(int)
    for f in reported:
        est[f["pass"]] += int((f["exclusive_ns"] if "exclusive_ns" in f else f["impact_ns"]) or 0)
    for t in issues:
        true[t["kind"]] += int(t["impact_ns"])
    return {
        "n_reported": len(reported), "n_info": len(findings) - len(reported), "n_matched": len(matched_f),
        "n_truth": len(issues), "n_found": len(found_t), "est": dict(est), "true": dict(true),
        "false_kinds": sorted({f["pass"] for f in reported if f not in matched_f}),
        "missed": sorted(t["kind"] for t in issues if t not in found_t),
        "run_ns": truth.get("run_ns"),
        "whatif": dict(whatif or {}),  # pass -> saving with all its findings fixed (a replay)
        "all_fixed": all_fixed,  # the replay's saving with every finding fixed
    }


def run_one(store: Store, scenario: str, seed: int, work: Path, all_fixed_truth: bool = False) -> dict:
    out = work / f"{scenario}-{seed}"
    truth = simulate(scenario, seed, out)
    [res] = ingest_paths(store, [out], name=out.name, after_publish=after_publish)
    if res.error:
        raise RuntimeError(f"ingest of {out.name} failed: {res.error}")
    con = store.connect(res.id)
    try:
        cols = [d[0] for d in con.execute("SELECT * FROM findings").description]
        findings = [dict(zip(cols, r)) for r in con.execute("SELECT * FROM findings").fetchall()]
        failed = con.execute("SELECT pass, reason FROM analysis_status WHERE status = 'failed'").fetchall()
        whatif = dict(con.execute("SELECT pass, impact_ns FROM analysis_status WHERE status = 'ran'").fetchall())
        row = con.execute("SELECT all_fixed_saving_ns FROM whatif").fetchone()
    finally:
        con.close()
    if failed:
        raise RuntimeError(f"{out.name}: passes failed: {failed}")
    r = score_run(findings, truth, whatif, int(row[0]) if row else None)
    if all_fixed_truth and scenario == "mixed":
        r["true_all_fixed"] = model_all_fixed(scenario, seed)
    return r


def model_all_fixed(scenario: str, seed: int) -> int:
    """The device model's saving with every issue of the run removed (one more model run)."""
    from acceltrace.sim import scenarios
    from acceltrace.sim.run import run_plan

    plan = scenarios.build(scenario, seed)
    clean = plan
    for kind in plan.issues:
        clean = clean.remove(kind)
    return int(round(run_plan(plan).duration_ns - run_plan(clean).duration_ns))


def real_trace_check(store: Store) -> str:
    if not A100.exists():
        return f"n/a: {A100.relative_to(ROOT)} not present"
    [res] = ingest_paths(store, [A100], after_publish=after_publish)
    if res.error:
        return f"n/a: ingest failed: {res.error}"
    con = store.connect(res.id)
    try:
        q = """
            SELECT s.host_mem, s.direction, count(*) AS copies,
                   count(f.slice_id) AS flagged
            FROM slices s JOIN tracks t ON t.track_id = s.track_id
            LEFT JOIN (SELECT DISTINCT slice_id FROM findings WHERE pass = 'pageable_memory') f
              ON f.slice_id = s.slice_id
            WHERE t.lane = 'pcie' AND s.host_mem IS NOT NULL
            GROUP BY s.host_mem, s.direction ORDER BY s.host_mem, s.direction
        """
        rows = con.execute(q).fetchall()
        status = con.execute("SELECT pass, status, n_findings FROM analysis_status ORDER BY pass").fetchall()
    finally:
        con.close()
    lines = [f"  {mem:<9} {d:<4} copies={n:<5} flagged as pageable={k}" for mem, d, n, k in rows]
    ok = all((k == n) if mem == "pageable" else (k == 0) for mem, _d, n, k in rows)
    lines.append("  passes: " + ", ".join(f"{p}={s}({n})" for p, s, n in status))
    return ("PASS" if ok else "FAIL") + ": every pageable copy flagged, no pinned one\n" + "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--no-real", action="store_true", help="skip the real-trace check")
    ap.add_argument("--verbose", action="store_true", help="one line per run")
    ap.add_argument("--all-fixed", action="store_true",
                    help="mixed runs: also re-run the model without any issue (the all-fixed truth)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="acceltrace-acc-") as tmp:
        work = Path(tmp)
        os.environ.pop("ACCELTRACE_STORE", None)
        store = Store(work / "store")
        per_scn: dict[str, list[dict]] = defaultdict(list)
        for scn in args.scenarios:
            for seed in args.seeds:
                r = run_one(store, scn, seed, work, args.all_fixed)
                per_scn[scn].append(r)
                if args.verbose:
                    print(f"  {scn:<28} seed {seed:<3} reported={r['n_reported']:<4} matched={r['n_matched']:<4} "
                          f"info={r['n_info']:<4} found {r['n_found']}/{r['n_truth']} est={r['est']} "
                          f"true={r['true']} false={r['false_kinds']} missed={r['missed']}", flush=True)
        print_table(per_scn, args.seeds)
        if not args.no_real:
            print()
            print("real trace (A100 Kineto, 45 pageable HtoD copies):", real_trace_check(store))
    return 0


def print_table(per_scn: dict[str, list[dict]], seeds: list[int]) -> None:
    print(f"seeds: {' '.join(map(str, seeds))}; reported = severity warning or error")
    print(f"{'scenario':<28} {'precision':>9} {'recall':>7} {'reported':>8} {'info':>5}  impact est / true (rel. error) per kind")
    tot = defaultdict(int)
    kind_est, kind_true = defaultdict(int), defaultdict(int)
    for scn, runs in per_scn.items():
        rep = sum(r["n_reported"] for r in runs)
        mat = sum(r["n_matched"] for r in runs)
        tr = sum(r["n_truth"] for r in runs)
        fnd = sum(r["n_found"] for r in runs)
        info = sum(r["n_info"] for r in runs)
        for k in ("rep", "mat", "tr", "fnd"):
            tot[k] += {"rep": rep, "mat": mat, "tr": tr, "fnd": fnd}[k]
        est, true = defaultdict(int), defaultdict(int)
        for r in runs:
            for k, v in r["est"].items():
                est[k] += v
            for k, v in r["true"].items():
                true[k] += v
        if scn != "mixed":  # mixed issues overlap: their truths are not additive (see below)
            for k in set(est) | set(true):
                kind_est[k] += est.get(k, 0)
                kind_true[k] += true.get(k, 0)
        prec = f"{mat / rep:.2f}" if rep else ("1.00" if tr == 0 else "-")
        rec = f"{fnd / tr:.2f}" if tr else "-"
        parts = []
        for k in sorted(set(est) | set(true)):
            e, t = est.get(k, 0), true.get(k, 0)
            err = f"{(e - t) / t:+.0%}" if t else "n/a"
            parts.append(f"{k} {e / 1e6:.2f}/{t / 1e6:.2f} ms ({err})")
        print(f"{scn:<28} {prec:>9} {rec:>7} {rep:>8} {info:>5}  {'; '.join(parts) or '-'}")
    p = tot["mat"] / tot["rep"] if tot["rep"] else 1.0
    r = tot["fnd"] / tot["tr"] if tot["tr"] else 1.0
    print(f"{'all':<28} {p:>9.2f} {r:>7.2f} {tot['rep']:>8}")
    for r in per_scn.get("mixed", []):
        te, tt = sum(r["est"].values()), sum(r["true"].values())
        print(f"mixed run: {r['run_ns'] / 1e6:.1f} ms; summed truths {tt / 1e6:.1f} ms "
              f"({'more than the run: the issues overlap' if tt > r['run_ns'] else 'within the run'}), "
              f"summed estimates {te / 1e6:.1f} ms")
    print("impact per kind over the single-issue runs (estimate / truth, relative error; target within 20%):")
    for k in sorted(kind_true):
        e, t = kind_est.get(k, 0), kind_true[k]
        print(f"  {k:<28} {e / 1e6:>9.2f} / {t / 1e6:>9.2f} ms  {((e - t) / t if t else 0):+.0%}")
    print_whatif(per_scn)


def print_whatif(per_scn: dict[str, list[dict]]) -> None:
    """The what-if (replay) savings against the truth: per kind and run (target within 10%), and in the
    mixed runs each pass's against its single-issue counterfactual and the all-fixed (target 15%)."""
    print("what-if saving per kind and run (the pass's findings all fixed, replayed) / truth = ratio:")
    print(f"  {'scenario':<28} {'kind':<28} {'what-if ms':>10} {'truth ms':>9} {'ratio':>6} {'exclusive':>9}")
    for scn, runs in per_scn.items():
        for r in runs:
            for k, t in sorted(r["true"].items()):
                w = r["whatif"].get(k, 0)
                print(f"  {scn:<28} {k:<28} {w / 1e6:>10.2f} {t / 1e6:>9.2f} {w / t if t else 0:>6.2f}"
                      f" {r['est'].get(k, 0) / t if t else 0:>9.2f}")
            if scn == "mixed" and r.get("all_fixed") is not None:
                ta = r.get("true_all_fixed")
                ratio = f"{r['all_fixed'] / ta:.2f}" if ta else "n/a (--all-fixed)"
                print(f"  {scn:<28} {'(all fixed)':<28} {r['all_fixed'] / 1e6:>10.2f}"
                      f" {ta / 1e6 if ta else float('nan'):>9.2f} {ratio:>6}")


if __name__ == "__main__":
    raise SystemExit(main())
