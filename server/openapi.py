"""The OpenAPI document says what the server really answers, so contract tools can test it.

FastAPI lists only the success response and 422 of declared parameters. Every operation here
also answers the JSON error shape `{"error": {"code", "message"}}` (server/app.py) for the
statuses it can give: 400 (bad request), 403 (Host/Origin refused, server/security.py), 404
(unknown trace or slice), 409 (the trace is not ready), 413 (upload too large), 422
(validation, a failed ingest) and 503 (busy). The upload's body (multipart field `file`, or
raw bytes with ?name=) is read from the request stream, not declared as a parameter, so it
is described here. A 400 may also come from the HTTP layer itself, in text/plain.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"],
                             "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}},
}
_WHY = {"400": "Bad request", "403": "Host or Origin refused", "404": "Not found", "409": "Not ready",
        "413": "Too large", "422": "Invalid input or failed ingest", "429": "Too many queries from this client; retry after Retry-After",
        "503": "Busy; retry after Retry-After"}
_COMMON = ("400", "403", "404", "422", "503")
# uvicorn answers a request its HTTP parser refuses (a request line or header block over its limits,
# h11's 16 KiB by default) itself, in text/plain, before the application sees it
_PLAIN_400 = ("; a request the HTTP layer cannot parse (e.g. a request line over 16 KiB) is answered in text/plain"
              " by the HTTP server before it reaches the application")
UPLOAD_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                                           "properties": {"file": {"type": "string", "format": "binary"}}}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    },
}


def install(app: FastAPI) -> None:
    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        doc.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for path, ops in doc.get("paths", {}).items():
            for method, op in ops.items():
                codes = list(_COMMON)
                if "{trace_id}" in path:
                    codes.append("409")
                if path.endswith("/query"):
                    codes.append("429")  # server/query_pool.py: this client's concurrent queries
                if method == "post" and path == "/api/traces":
                    codes.append("413")
                    op["requestBody"] = UPLOAD_BODY
                for code in codes:
                    op.setdefault("responses", {}).setdefault(code, {"description": _WHY[code], **ref})
                bad = op["responses"]["400"]
                bad["description"] = _WHY["400"] + _PLAIN_400
                bad.setdefault("content", {})["text/plain"] = {"schema": {"type": "string"}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi
