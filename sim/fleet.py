"""`acceltrace sim fleet`: one data-parallel job on N ranks, some of them slow for a named cause.

Every rank is one host process driving one accelerator of the same machine type (drawn from
the seed). A step is: wait for the prefetched batch, forward, prefetch the next batch on the
copy queue, backward, optimizer, then an all-reduce of the gradients, which no rank leaves
before the last one has arrived (the host waits for it: the step boundary). So a slow rank
makes every other rank wait inside its all-reduce.

Ranks live in separate model runs (a job of 1,000 ranks never sits in one process), coupled in
two passes: pass 1 runs every rank with an all-reduce that only pays its ring time and records
when the rank arrived at each step's all-reduce, measured from that step's start; pass 2 re-runs
every rank with each all-reduce lasting its ring time plus the wait for that step's last
arrival. A rank's work between two all-reduces does not depend on when the step started, so the
arrivals of pass 2 are those of pass 1 (to within the model's CPU-cost and kernel jitter).

Slow causes (drawn by the seed, each visible in the trace alone):
- link_degraded: the link trained at a lower generation or width (trace_meta link_gen /
  link_width, lower achieved H2D bandwidth); the batch copy no longer hides under compute.
- throttled: a thermally throttled device (clocks down 30-45 %): longer kernels at equal work.
- pageable: the host's batch buffers are pageable: staged copies block the host mid-step.
- noisy_neighbour: another tenant takes the host's CPU: the thread is descheduled for
  milliseconds between runtime calls (host-side gaps, late launches, device idle).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

from acceltrace.sim import ground_truth
from acceltrace.sim.config import random_machine
from acceltrace.sim.device import Kernel
from acceltrace.sim.pcie import LinkConfig
from acceltrace.sim.run import run_plan
from acceltrace.sim.scenarios.base import Plan
from acceltrace.sim.session import write_run
from acceltrace.sim.trace import COLUMNS

CAUSES = ("link_degraded", "throttled", "pageable", "noisy_neighbour")
COLLECTIVE_NAME = "allreduce_ring_bf16"
COMPUTE_Q, H2D_Q = 0, 1
BF16 = 2
DEFAULT_EVENTS = 10_000
MAX_RANKS = 100_000

_NAME, _TS = COLUMNS.index("name"), COLUMNS.index("ts")


@dataclass(frozen=True)
class Collective(Kernel):
    """An all-reduce kernel: its ring time plus the time it spins waiting for the last rank."""

    ring_ns: float = 0.0
    wait_ns: float = 0.0

    def duration_ns(self, dev) -> float:
        return self.ring_ns + self.wait_ns + 600.0


def job_plan(seed: int, n_ranks: int) -> dict:
    """The job: one machine type, workload sizes, and which ranks are slow for which cause."""
    rng = random.Random(f"fleet:{seed}")
    base = random_machine(seed, n_devices=1, switch="none")
    base = replace(base, jitter=0.01)
    layers = rng.choice((4, 6, 8))
    d = rng.choice((1024, 1536, 2048))
    tokens = rng.choice((4096, 8192))
    n_slow = max(1, min(n_ranks // 4, int(round(n_ranks * rng.uniform(0.04, 0.12)))))
    if n_ranks < 2:
        n_slow = 0
    slow_ranks = sorted(rng.sample(range(n_ranks), n_slow))
    slow = {}
    for r in slow_ranks:
        cause = rng.choice(CAUSES)
        slow[r] = {"cause": cause, **_severity(rng, cause, base.link)}
    return {"seed": seed, "ranks": n_ranks, "machine": base, "layers": layers, "d": d, "tokens": tokens,
            "slow": slow, "job": f"simjob-{seed}"}


def _severity(rng: random.Random, cause: str, link: LinkConfig) -> dict:
    if cause == "link_degraded":
        # about 8x less bandwidth (a riser trained at x2, a slot stuck two generations down at half
        # width): the batch copy outlasts compute and all-reduce together, so the rank is late
        options = [(max(1, link.gen - 1), max(1, link.width // 4)), (max(1, link.gen - 2), max(1, link.width // 2)),
                   (link.gen, max(1, link.width // 8))]
        gen, width = rng.choice(options)
        return {"link_gen": gen, "link_width": width}
    if cause == "throttled":
        return {"clock_factor": rng.uniform(0.55, 0.7)}
    if cause == "noisy_neighbour":
        return {"stall_p": rng.uniform(0.45, 0.65), "stall_ns": rng.uniform(4e6, 9e6)}
    return {}


def _kernels(job: dict) -> dict:
    L, d, t = job["layers"], job["d"], job["tokens"]
    w_layer = 12 * d * d * BF16
    act = t * d * BF16
    return {
        "fwd": [Kernel("layer_fwd_matmul", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
                Kernel("layer_fwd_norm_act", "vector", 10 * t * d, 4 * act, BF16, BF16)],
        "bwd": [Kernel("layer_bwd_dgrad", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
                Kernel("layer_bwd_wgrad", "matrix", 2 * t * 12 * d * d, w_layer + 8 * act, BF16, BF16),
                Kernel("layer_bwd_norm_act", "vector", 12 * t * d, 5 * act, BF16, BF16)],
        "opt": Kernel("adamw_update", "vector", 12 * L * w_layer // BF16, 8 * L * w_layer, 4, 4),
        "grad_bytes": L * w_layer,
    }


def _sizes(job: dict) -> dict:
    """Batch and ring sizes from the healthy machine, so every job is balanced alike whatever its
    hardware: the batch copy takes ~35 % of a step's compute (hidden under it), the ring ~15-30 %."""
    cfg = job["machine"]
    ks = _kernels(job)
    L = job["layers"]
    compute = sum(k.duration_ns(cfg.device) for k in ks["fwd"] + ks["bwd"]) * L + ks["opt"].duration_ns(cfg.device)
    link_bpns = cfg.link.payload_bytes_per_ns
    batch = int(0.35 * compute * link_bpns) // 4096 * 4096
    n = job["ranks"]
    ring_ns = 0.15 * compute * (2 * (n - 1) / n if n > 1 else 0.0) + 20_000.0
    return {"compute_ns": compute, "batch_bytes": max(batch, 1 << 20), "ring_ns": ring_ns,
            "events_per_step": (5 * L + 2) * 4 + 24}


def rank_config(job: dict, rank: int):
    """The rank's machine: the job's, with its own clocks, seed and (for a slow rank) its cause."""
    base = job["machine"]
    crng = random.Random(f"fleet:{job['seed']}:rank:{rank}:clock")
    clocks = tuple(replace(c, offset_ticks=float(crng.randrange(1 << 36, 1 << 44)),
                           drift_ppm=crng.uniform(-40.0, 40.0)) for c in base.clocks)
    cfg = replace(base, clocks=clocks, seed=job["seed"] * 100_003 + rank,
                  start_ns=base.start_ns + crng.randrange(0, 10**9))
    s = job["slow"].get(rank)
    if s is None:
        return cfg
    if s["cause"] == "link_degraded":
        cfg = replace(cfg, link=LinkConfig(s["link_gen"], s["link_width"], cfg.link.mps, cfg.link.mrrs))
    elif s["cause"] == "throttled":
        f = s["clock_factor"]
        dev = cfg.device
        cfg = replace(cfg, device=replace(dev, matrix_flops_per_ns=dev.matrix_flops_per_ns * f,
                                          vector_flops_per_ns=dev.vector_flops_per_ns * f))
    elif s["cause"] == "noisy_neighbour":
        h = cfg.host
        cfg = replace(cfg, host=replace(h, launch_ns=h.launch_ns * 1.5, memcpy_ns=h.memcpy_ns * 1.5))
    return cfg


def _program(rt, p: dict, issues, steps: int):
    ks = p["kernels"]
    L = p["layers"]
    rng = random.Random(p["stall_seed"])
    stall_p, stall_ns = p.get("stall_p", 0.0), p.get("stall_ns", 0.0)
    colls = p["collectives"]

    def launch(k):
        if stall_p and rng.random() < stall_p:
            yield from rt.host_work(stall_ns * rng.uniform(0.5, 1.5))  # descheduled: not traced
        return (yield from rt.launch(COMPUTE_Q, k))

    yield from rt.malloc(ks["grad_bytes"] * 4)
    batches = []
    for _ in range(2):
        batches.append((yield from rt.host_alloc(p["batch_bytes"], pinned=p["pinned"])))
    batches[0].write()
    yield from rt.memcpy(H2D_Q, batches[0], p["batch_bytes"], "h2d")
    for s in range(steps):
        rt.step_begin()
        ev = yield from rt.event_record(H2D_Q)
        yield from rt.queue_wait_event(COMPUTE_Q, ev)
        for _ in range(L):
            for k in ks["fwd"]:
                yield from launch(k)
        nxt = batches[(s + 1) % 2]
        nxt.write()
        yield from rt.memcpy(H2D_Q, nxt, p["batch_bytes"], "h2d")
        for _ in range(L):
            for k in ks["bwd"]:
                yield from launch(k)
        yield from launch(ks["opt"])
        yield from launch(colls[s])
        done = yield from rt.event_record(COMPUTE_Q)
        yield from rt.event_synchronize(done)
    yield from rt.device_synchronize()


def _plan(job: dict, rank: int, steps: int, waits: list[float] | None) -> Plan:
    cfg = rank_config(job, rank)
    sizes = _sizes(job)
    s = job["slow"].get(rank, {})
    ring = sizes["ring_ns"]
    ks = _kernels(job)
    grad = ks["grad_bytes"]
    colls = [Collective(COLLECTIVE_NAME, "vector", grad // BF16, 3 * grad, BF16, BF16, ring_ns=ring,
                        wait_ns=(waits[i] if waits else 0.0)) for i in range(steps)]
    params = {"kernels": ks, "layers": job["layers"], "batch_bytes": sizes["batch_bytes"],
              "pinned": s.get("cause") != "pageable", "collectives": colls,
              "stall_seed": f"fleet:{job['seed']}:rank:{rank}:stall",
              "stall_p": s.get("stall_p", 0.0), "stall_ns": s.get("stall_ns", 0.0)}
    return Plan(cfg=cfg, params=params, program=_program, steps=steps, thread_names=("main",))


def _arrivals(result) -> list[float]:
    """Per step: when this rank's all-reduce started on the device, from that step's start."""
    marks = result.machine.step_marks[0]
    starts = [row[_TS] for row in result.rec.rows if row[_NAME] == COLLECTIVE_NAME]
    return [a - m for a, m in zip(starts, marks)]


def steps_for_events(job: dict, events: int) -> int:
    return max(3, int(round(events / _sizes(job)["events_per_step"])))


def write_fleet(out_dir: Path, n_ranks: int, seed: int = 0, events: int = DEFAULT_EVENTS,
                progress=None) -> dict:
    """Write N run directories (rank_00000/ ...) and fleet_truth.json; returns a summary."""
    if not 1 <= n_ranks <= MAX_RANKS:
        raise ValueError(f"--ranks must be between 1 and {MAX_RANKS}, got {n_ranks}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    job = job_plan(seed, n_ranks)
    steps = steps_for_events(job, events)
    arrivals = []
    for r in range(n_ranks):
        arrivals.append(_arrivals(run_plan(_plan(job, r, steps, None))))
        if progress:
            progress("pass 1 (arrivals)", (r + 1) / n_ranks)
    last = [max(a[s] for a in arrivals) for s in range(steps)]
    typical = [sorted(a[s] for a in arrivals)[n_ranks // 2] for s in range(steps)]
    # how late each slow rank reaches the all-reduce, median over steps, vs the median rank
    late = {r: sorted(arrivals[r][s] - typical[s] for s in range(steps))[steps // 2] for r in job["slow"]}
    width = max(5, len(str(n_ranks - 1)))
    total_events = 0
    for r in range(n_ranks):
        waits = [last[s] - arrivals[r][s] for s in range(steps)]
        plan = _plan(job, r, steps, waits)
        result = run_plan(plan)
        truth = ground_truth.document(result, "fleet", seed, [])
        truth["fleet"] = {"job": job["job"], "rank": r, "world_size": n_ranks,
                          "slow_cause": job["slow"].get(r, {}).get("cause")}
        info = write_run(result, truth, out_dir / f"rank_{r:0{width}d}", plan.cfg.seed,
                         header_extra=_header(job, r))
        total_events += info["events"]
        if progress:
            progress("pass 2 (traces)", (r + 1) / n_ranks)
    fleet_truth = {
        "job": job["job"], "seed": seed, "ranks": n_ranks, "steps": steps,
        "arrival_ns_median": sorted(typical)[steps // 2],
        "slow_ranks": [{"rank": r, "cause": v["cause"], "late_ns_median": int(round(late[r])),
                        **{k: val for k, val in v.items() if k != "cause"}} for r, v in sorted(job["slow"].items())],
    }
    tmp = out_dir / ".fleet_truth.json.tmp"
    tmp.write_text(json.dumps(fleet_truth, indent=1) + "\n")
    os.replace(tmp, out_dir / "fleet_truth.json")
    return {"out": str(out_dir), "ranks": n_ranks, "steps": steps, "events": total_events,
            "slow_ranks": fleet_truth["slow_ranks"]}


def _header(job: dict, rank: int) -> dict:
    """What a launcher tells the profiler about the rank (torch.distributed's distributedInfo)."""
    return {"distributed": {"job": job["job"], "rank": rank, "world_size": job["ranks"], "backend": "sim-ring"},
            "host": {"hostname": f"simnode{rank:05d}", "pid": 4000 + rank}}
