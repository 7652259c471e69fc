"""The HTML pages: the trace list (/) and a trace (/t/{id}); their JSON twins live under /api."""

from __future__ import annotations

import html

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from acceltrace.server.deps import ApiError, AppState, get_state
from acceltrace.server.metadata import catalog_entry, trace_metadata
from acceltrace.store.sandbox import make_ahead

router = APIRouter(tags=["pages"])


def _render(request: Request, state: AppState, template: str, context: dict, status: int = 200) -> HTMLResponse:
    templates = request.app.state.templates
    if templates is not None and (state.web_dir / "templates" / template).exists():
        return templates.TemplateResponse(request, template, context, status_code=status)
    # the web UI is not installed: a minimal page that still links the JSON twins
    tid = context.get("trace_id")
    body = (f"<h1>acceltrace</h1><p>trace {html.escape(tid)}: <a href='/api/traces/{html.escape(tid)}'>metadata</a></p>"
            if tid else "<h1>acceltrace</h1><p><a href='/api/traces'>traces (JSON)</a></p>")
    return HTMLResponse(f"<!doctype html><meta charset=utf-8><title>acceltrace</title>{body}", status_code=status)


@router.get("/", response_class=HTMLResponse, summary="Trace list page",
            description="Renders web/templates/index.html; its JSON twin is GET /api/traces.")
def index_page(request: Request, state: AppState = Depends(get_state)):
    return _render(request, state, "index.html", {"trace_id": None, "trace": None})


@router.get("/t/{trace_id}", response_class=HTMLResponse, summary="Trace page",
            description="Renders web/templates/trace.html with the trace's metadata; its JSON twin is "
                        "GET /api/traces/{id}. Unknown ids answer 404.")
def trace_page(trace_id: str, request: Request, state: AppState = Depends(get_state)):
    row = state.row(trace_id)
    h = state.open_trace(trace_id) if row["status"] == "ready" else None
    if h is not None:  # open already: the page carries its metadata
        trace = trace_metadata(h, row)
    else:
        # Not open yet (a drop's page, a link to a trace nobody viewed since the server started): the page
        # goes now with the catalog row and asks /api/traces/{id} for the rest, while the handle opens and
        # the metadata is built here, beside the page's modules loading (35-55 ms that waited before them)
        if row["status"] == "ready":
            def warm(handle) -> None:
                trace_metadata(handle, row)
                handle.ready_for_tiles()

            state.warm(trace_id, warm)
        trace = catalog_entry(row)
    return _render(request, state, "trace.html", {"trace_id": trace_id, "trace": trace})


@router.get("/t/{trace_id}/views", response_class=HTMLResponse, summary="Aggregate views page",
            description="Renders web/templates/views.html: flame graph, top-down and bottom-up trees, the op-to-kernel "
                        "rollup, the events table and the SQL query page of a trace (docs/ui.md); their JSON twins "
                        "are /tree, /rollup, /events and /query.")
def views_page(trace_id: str, request: Request, state: AppState = Depends(get_state)):
    row = state.row(trace_id)
    trace = trace_metadata(state.trace(trace_id), row) if row["status"] == "ready" else catalog_entry(row)
    make_ahead(state.store)  # its SQL view's first query finds its process started (store/sandbox.py)
    return _render(request, state, "views.html", {"trace_id": trace_id, "trace": trace})


def not_found_page(request: Request, err: ApiError) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><meta charset=utf-8><title>not found</title><h1>{err.status}</h1>"
        f"<p>{html.escape(err.message)}</p><p><a href='/'>all traces</a></p>", status_code=err.status)
