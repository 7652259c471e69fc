"""Fleets: GET /api/fleets (list), GET /api/fleets/{id} (the fleet's JSON) and its page, /fleet/{id}."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from acceltrace.fleet import layout
from acceltrace.fleet.query import report
from acceltrace.server.deps import ApiError, AppState, get_state

router = APIRouter(tags=["fleet"])


def _fleet_or_404(state: AppState, fleet_id: str) -> dict:
    try:
        return layout.resolve(state.store, fleet_id) if layout.is_fleet_id(fleet_id) else {}
    except layout.FleetNotFound:
        return {}


@router.get("/api/fleets", summary="List fleets",
            description="Every fleet in the store: id, name, inputs, builds, counts (docs/fleet.md).")
def list_fleets(state: AppState = Depends(get_state)) -> dict:
    return {"fleets": layout.list_fleets(state.store)}


@router.get("/api/fleets/{fleet_id}", summary="A fleet",
            description="The fleet's traces (tags, metrics, outlier and outlier_metrics, cause), fleet-wide "
                        "findings ranked by impact, stragglers, per-job medians and the step-time histogram "
                        "(docs/fleet.md lists every key).")
async def get_fleet(fleet_id: str, state: AppState = Depends(get_state)) -> dict:
    fleet = _fleet_or_404(state, fleet_id)
    if fleet.get("id") != fleet_id:
        raise ApiError(404, "not_found", f"no fleet with id {fleet_id!r} in this store")
    try:
        return await run_in_threadpool(report, state.store, fleet_id, True)
    except layout.FleetNotFound as e:
        raise ApiError(404, "not_found", str(e)) from None


@router.get("/fleet/{fleet_id}", response_class=HTMLResponse, summary="Fleet page",
            description="Renders web/templates/fleet.html: ranks x metrics with a heat colour per cell, the "
                        "step-time distribution, outliers first; its JSON twin is GET /api/fleets/{id}.")
def fleet_page(fleet_id: str, request: Request, state: AppState = Depends(get_state)):
    fleet = _fleet_or_404(state, fleet_id)
    if fleet.get("id") != fleet_id:
        raise ApiError(404, "not_found", f"no fleet with id {fleet_id!r} in this store")
    templates = request.app.state.templates
    if templates is None or not (state.web_dir / "templates" / "fleet.html").exists():
        return HTMLResponse("<!doctype html><meta charset=utf-8><title>acceltrace fleet</title>"
                            f"<p>the web UI is not installed: see <a href='/api/fleets/{fleet_id}'>the JSON</a></p>")
    return templates.TemplateResponse(request, "fleet.html", {"fleet_id": fleet_id, "name": fleet.get("name") or ""})
