"""Aggregate views of a range: call trees (top-down, bottom-up) and the op-to-device rollup."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from acceltrace.server.deps import ApiError, AppState, get_state
from acceltrace.store import aggregates

router = APIRouter(prefix="/api/traces", tags=["views"])


def _range(h, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    """Relative [start, end) -> absolute; the whole trace by default."""
    t0 = h.start_ns + (start_ns or 0)
    t1 = h.start_ns + end_ns if end_ns is not None else 1 << 62  # stored times never reach 2^62 (the builder)
    if t1 <= t0:
        raise ApiError(400, "bad_request", f"end_ns ({end_ns}) must be greater than start_ns ({start_ns or 0})")
    return t0, t1


@router.get("/{trace_id}/tree", summary="Call tree of a range (top-down or bottom-up)",
            description="CPU slices of [start_ns, end_ns) (relative; the whole trace by default), clipped to it, "
                        "as a tree of nodes {name, count, total_ns, self_ns, children} under a root. top-down: "
                        "paths from depth 0 down; bottom-up: each frame's self time up through its callers. At "
                        f"most {aggregates.NODES_MAX} nodes; the rest of a level is one '(other: N more)' node.")
def tree(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
         track: list[int] | None = Query(None, description="only these tracks (repeatable)"),
         mode: str = Query("top-down", pattern="^(top-down|bottom-up)$"),
         state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    t0, t1 = _range(h, start_ns, end_ns)
    with h.cursor() as cur:
        return aggregates.call_tree(cur, t0, t1, track, mode)


@router.get("/{trace_id}/rollup", summary="Op-to-device rollup of a range",
            description="Per CPU slice name in [start_ns, end_ns): count, host_ns (its clipped time), and the "
                        "device_ns, copy_ns and bytes of the kernels, memsets and copies launched from inside it "
                        "through correlation ids (inclusive: nested ops each get their launches), kernels and "
                        f"copies counts; largest device time first, at most {aggregates.ROLLUP_MAX} rows.")
def rollup(trace_id: str, start_ns: int | None = Query(None, ge=0), end_ns: int | None = Query(None, ge=1),
           state: AppState = Depends(get_state)) -> dict:
    h = state.trace(trace_id)
    t0, t1 = _range(h, start_ns, end_ns)
    with h.cursor() as cur:
        return {"rows": aggregates.rollup(cur, t0, t1)}
