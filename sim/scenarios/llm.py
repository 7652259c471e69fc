"""llm-inference: a transformer serving run with resident weights, prefill, decode and KV-cache traffic.

Per device (data-parallel replicas, one host thread each): batches of requests; each batch
uploads its token ids, runs a compute-bound prefill, then decode steps that are HBM-bound
(every step reads all weights and the growing KV cache), samples on the device and copies the
next tokens back, which the host needs before it can schedule the next step. KV blocks of the
next batch are swapped in on the copy queue while the current batch decodes, and the finished
batch's blocks are swapped out. Nothing is injected: ground truth lists no issues.
"""

from __future__ import annotations

import random

from acceltrace.sim.config import random_machine
from acceltrace.sim.device import Kernel
from acceltrace.sim.scenarios.base import Plan

COMPUTE_Q, H2D_Q, D2H_Q = 0, 1, 2
BF16 = 2


def _u(rng, lo, hi):
    return lo + (hi - lo) * rng.random()


def build(seed: int) -> Plan:
    rng = random.Random(f"llm:{seed}")
    cfg = random_machine(seed)
    layers = rng.choice((8, 12, 16, 24, 32))
    d = rng.choice((2048, 3072, 4096, 5120))
    vocab = rng.choice((32000, 50304, 128256))
    batch = rng.choice((4, 8, 16, 32))
    prompt = rng.choice((128, 256, 512, 1024))
    decode_per_batch = rng.randrange(8, 33)
    params = {
        "layers": layers, "d": d, "vocab": vocab, "batch": batch, "prompt": prompt,
        "decode_per_batch": decode_per_batch,
        "kv_swap_bytes": rng.randrange(8, 129) << 20,
        "sched_ns": _u(rng, 15_000, 60_000),
    }
    per_step = layers * 6 * 4 + 30
    names = tuple("main" if i == 0 else f"worker {i}" for i in range(cfg.n_devices))
    # default size: about 40 k records, whole batches
    steps = max(decode_per_batch, 40_000 // (per_step * cfg.n_devices) // decode_per_batch * decode_per_batch)
    return Plan(cfg=cfg, params=params, program=program, steps=steps,
                events_per_step=per_step * cfg.n_devices, thread_names=names)


def _layer_kernels(p: dict, tokens: int, ctx: int) -> list[Kernel]:
    """One transformer layer for `tokens` new tokens attending over `ctx` positions."""
    d = p["d"]
    b = p["batch"]
    w_qkv, w_o, w_mlp = 3 * d * d * BF16, d * d * BF16, 8 * d * d * BF16
    act = tokens * d * BF16
    kv_read = b * ctx * d * 2 * BF16
    return [
        Kernel("rmsnorm", "vector", 4 * tokens * d, 2 * act, BF16, BF16),
        Kernel("qkv_proj", "matrix", 2 * tokens * d * 3 * d, w_qkv + 4 * act, BF16, BF16),
        Kernel("attention", "matrix", 4 * b * (tokens // b) * ctx * d, kv_read + 2 * act, BF16, BF16),
        Kernel("out_proj", "matrix", 2 * tokens * d * d, w_o + 2 * act, BF16, BF16),
        Kernel("mlp_up_gate", "matrix", 2 * tokens * d * 8 * d * 2 // 3, w_mlp * 2 // 3 + 6 * act, BF16, BF16),
        Kernel("mlp_down", "matrix", 2 * tokens * d * 8 * d // 3, w_mlp // 3 + 6 * act, BF16, BF16),
    ]


def program(rt, p: dict, issues: tuple[str, ...], steps: int):
    b, d, vocab = p["batch"], p["d"], p["vocab"]
    bucket = 64  # context lengths rounded up, so kernel shapes (and their args) repeat like real buckets
    yield from rt.malloc(p["kv_swap_bytes"] * 4)
    tokens_in = yield from rt.host_alloc(b * p["prompt"] * 4, pinned=True)
    tokens_out = yield from rt.host_alloc(b * 4, pinned=True)
    kv_host = yield from rt.host_alloc(p["kv_swap_bytes"], pinned=True)
    yield from rt.memcpy(H2D_Q, kv_host, p["kv_swap_bytes"], "h2d")
    lm_head = Kernel("lm_head", "matrix", 2 * b * d * vocab, d * vocab * BF16 + b * vocab * 4, BF16, BF16)
    sample = Kernel("sample_topk", "vector", 4 * b * vocab, b * vocab * 4, 4, 4)
    shapes: dict[tuple[int, int], list[Kernel]] = {}

    def layer(tokens: int, ctx: int) -> list[Kernel]:
        got = shapes.get((tokens, ctx))
        if got is None:
            got = shapes[(tokens, ctx)] = _layer_kernels(p, tokens, ctx)
        return got

    done_steps = 0
    while done_steps < steps:
        n_decode = min(p["decode_per_batch"], steps - done_steps)
        rt.step_begin()  # a step of the scale path is a whole batch
        tokens_in.write()
        yield from rt.host_work(p["sched_ns"])
        yield from rt.memcpy(H2D_Q, tokens_in, b * p["prompt"] * 4, "h2d")
        ev = yield from rt.event_record(H2D_Q)
        yield from rt.queue_wait_event(COMPUTE_Q, ev)
        prompt_tokens = b * p["prompt"]
        for _ in range(p["layers"]):
            for k in layer(prompt_tokens, p["prompt"]):
                yield from rt.launch(COMPUTE_Q, k)
        yield from rt.launch(COMPUTE_Q, lm_head)
        yield from rt.launch(COMPUTE_Q, sample)
        # prefetch the next batch's KV blocks while this one decodes
        kv_host.write()
        yield from rt.memcpy(H2D_Q, kv_host, p["kv_swap_bytes"], "h2d")
        ctx = p["prompt"]
        for _step in range(n_decode):
            ctx += 1
            ctx_bucket = -(-ctx // bucket) * bucket
            for _ in range(p["layers"]):
                for k in layer(b, ctx_bucket):
                    yield from rt.launch(COMPUTE_Q, k)
            yield from rt.launch(COMPUTE_Q, lm_head)
            yield from rt.launch(COMPUTE_Q, sample)
            ev = yield from rt.event_record(COMPUTE_Q)
            yield from rt.queue_wait_event(D2H_Q, ev)
            tokens_out.write()
            yield from rt.memcpy(D2H_Q, tokens_out, b * 4, "d2h")
            got = yield from rt.event_record(D2H_Q)
            # the next step needs these tokens (stop conditions, streaming): a necessary wait
            yield from rt.event_synchronize(got)
            yield from rt.host_work(p["sched_ns"] * 0.3)
        done_steps += n_decode
        # the finished batch's KV blocks go back to host memory; the next batch needs its swap-in
        ev = yield from rt.event_record(COMPUTE_Q)
        yield from rt.queue_wait_event(D2H_Q, ev)
        kv_host.write()
        yield from rt.memcpy(D2H_Q, kv_host, p["kv_swap_bytes"], "d2h")
        ev = yield from rt.event_record(H2D_Q)
        yield from rt.queue_wait_event(COMPUTE_Q, ev)
    yield from rt.device_synchronize()
