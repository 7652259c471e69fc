"""Trace comparison: GET /api/diff (the object of docs/diff.md) and its page, /diff."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from acceltrace.diff.compare import Noise, compare
from acceltrace.diff.steps import StepsError
from acceltrace.server.deps import ApiError, AppState, get_state, not_found

router = APIRouter(tags=["diff"])


@router.get("/api/diff", summary="Compare two traces",
            description="A (before) against B (after): the headline (step time or makespan) with contributors "
                        "that add up, per-name rows per lane with count/total/mean/p50/p95 on each side, delta, "
                        "ratio and status, kernel deltas attributed to the launching op, and findings fixed/new/"
                        "changed per pass (docs/diff.md). Steps are positions of the aligned steps.")
async def diff(a: str = Query(..., description="trace id of A (before)"),
               b: str = Query(..., description="trace id of B (after)"),
               steps: str | None = Query(None, max_length=2000, description="e.g. 0,2-4 (default: all aligned)"),
               noise_pct: float = Query(5.0, ge=0, le=1000, description="relative change below this % is unchanged"),
               noise_ns: int = Query(10_000, ge=0, description="|delta| below this many ns is unchanged"),
               strip_templates: bool = Query(False, description="match names with <...> removed"),
               state: AppState = Depends(get_state)) -> dict:
    for tid in (a, b):
        state.ready_row(tid)
    try:
        return await run_in_threadpool(compare, state.store, a, b, steps, Noise(noise_pct, noise_ns), strip_templates)
    except StepsError as e:
        raise ApiError(400, "bad_request", str(e)) from None
    except FileNotFoundError:
        raise not_found(a if not state.store.trace_path(a).exists() else b) from None


@router.get("/diff", response_class=HTMLResponse, summary="Comparison page",
            description="Renders web/templates/diff.html: the two timelines stacked on one time axis aligned at "
                        "the chosen step, and the delta table; its JSON twin is GET /api/diff.")
def diff_page(request: Request, a: str = Query(...), b: str = Query(...), state: AppState = Depends(get_state)):
    rows = {k: state.ready_row(v) for k, v in (("a", a), ("b", b))}
    templates = request.app.state.templates
    if templates is None or not (state.web_dir / "templates" / "diff.html").exists():
        return HTMLResponse("<!doctype html><meta charset=utf-8><title>acceltrace diff</title>"
                            "<p>the web UI is not installed: see <a href='/api/diff'>/api/diff</a></p>")
    return templates.TemplateResponse(request, "diff.html", {"a": a, "b": b, "name_a": rows["a"]["name"],
                                                             "name_b": rows["b"]["name"]})
