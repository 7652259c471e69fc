"""The FastAPI app: assembles the routers, the shared state and one JSON error shape."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from acceltrace.analysis.runner import after_publish
from acceltrace.server import live as live_capture
from acceltrace.server.deps import WEB_DIR, ApiError, AppState
from acceltrace.server.limits import Limits, LimitsMiddleware, SlowBody
from acceltrace.server.tile_cache import TileFastPath
from acceltrace.server.routers import analysis, diff, export, fleet, live, pages, slices, tiles, traces, views
from acceltrace.server import openapi
from acceltrace.server.security import SecurityMiddleware, allowed_hosts
from acceltrace.server.static_assets import Assets, ImmutableStatic
from acceltrace.store.sandbox import make_ahead

log = logging.getLogger("acceltrace.server")

ROUTERS = [traces.router, tiles.router, slices.router, analysis.router, export.router, live.router, diff.router, fleet.router,
           views.router, pages.router]

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 413: "too_large",
                 415: "unsupported_media_type", 422: "validation_error", 429: "too_many_requests"}


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _wants_html(request: Request) -> bool:
    return request.method == "GET" and "text/html" in request.headers.get("accept", "") \
        and not request.url.path.startswith("/api/")


def _allowed_methods(request: Request, headers: dict) -> str:
    """Every method some route answers on this path (a route is asked as the router would)."""
    methods = {m.strip() for m in headers.get("Allow", headers.get("allow", "")).split(",") if m.strip()}
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            methods.add(method)
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods | {"OPTIONS"}))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        if _wants_html(request):
            return pages.not_found_page(request, exc)
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = _STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            # Starlette's Allow names only the first route of the path; list every method it has
            allow = _allowed_methods(request, getattr(exc, "headers", None) or {})
            if request.method == "OPTIONS":
                return Response(status_code=204, headers={"Allow": allow})
            message = f"method {request.method} is not allowed on {request.url.path} (allowed: {allow})"
            return error_response(405, code, message, {"Allow": allow})
        return error_response(exc.status_code, code, message, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{where}: {err.get('msg')}")
        return error_response(422, "validation_error", "; ".join(parts) or "invalid request")

    @app.exception_handler(SlowBody)
    async def slow_body(request: Request, exc: SlowBody):
        return error_response(408, "request_timeout", str(exc), {"Connection": "close"})

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect):
        # the client went away mid-request: nobody reads an answer, and it is not a server error
        log.info("client disconnected during %s %s", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", f"internal error: {type(exc).__name__}")


def create_app(store: str | Path | None = None, max_upload_bytes: int = 4 << 30,
               web_dir: Path | None = None, ingest_wait_s: float = 2.0, query_timeout_s: float = 10.0,
               bind_host: str | None = None, extra_hosts: list[str] | None = None,
               max_inflight: int | None = None, queries_ahead: bool = False) -> FastAPI:
    """The app for one store; nothing is opened until the lifespan starts.

    bind_host and extra_hosts decide which Host names it answers (server/security.py). queries_ahead:
    the lifespan starts the first SQL query's process (store/sandbox.py make_ahead), as `acceltrace
    serve`'s workers do: a query may reach any worker, not only the one that served its page.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state = AppState(store, max_upload_bytes=max_upload_bytes, web_dir=web_dir, ingest_wait_s=ingest_wait_s,
                         query_timeout_s=query_timeout_s)
        app.state.acceltrace = state
        tdir = state.web_dir / "templates"
        app.state.templates = Jinja2Templates(directory=str(tdir)) if tdir.is_dir() else None
        if app.state.templates is not None:
            app.state.templates.env.globals.update(assets.template_globals())
        app.state.live_manager = live_capture.LiveManager(app, state.store, after_publish)  # live traces
        app.state.live_manager.start()
        if queries_ahead:
            make_ahead(state.store)
        try:
            yield
        finally:
            app.state.live_manager.stop()
            state.close_all()

    # FastAPI's OpenTelemetry hooks off: nothing here exports telemetry, and their per-request
    # check (is a provider configured?) cost a memory-hit tile a third of its time (issue 15)
    app = FastAPI(title="acceltrace", version="0.1.0", lifespan=lifespan,
                  telemetry={"tracing": False, "metrics": False, "logs": False},
                  description="Correlated timeline and analysis of accelerator traces. All times are ns "
                              "relative to the trace start. Errors are {\"error\": {\"code\", \"message\"}}.")
    install_error_handlers(app)
    openapi.install(app)
    for router in ROUTERS:
        app.include_router(router)
    static_dir = (web_dir or WEB_DIR) / "static"
    assets = Assets(static_dir)  # the pages' files under a versioned, cached-for-good path (server/static_assets.py)
    app.mount(assets.prefix, ImmutableStatic(directory=str(static_dir), check_dir=False, since=assets.since),
              name="static_v")
    app.mount("/static", StaticFiles(directory=str(static_dir), check_dir=False), name="static")
    app.add_middleware(TileFastPath, fastapi_app=app, cold_job=tiles.cold_job)  # tiles, before routing
    app.add_middleware(LimitsMiddleware, limits=Limits.from_env(max_inflight=max_inflight))  # inside the Host check
    app.add_middleware(SecurityMiddleware, hosts=allowed_hosts(bind_host, extra_hosts))
    return app
