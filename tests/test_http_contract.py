"""What the HTTP layer promises contract tools: every method of a path in Allow, OPTIONS answered,
the error statuses and the upload body in the OpenAPI document."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from acceltrace.server.app import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(create_app(tmp_path_factory.mktemp("contract") / "store"), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("path, want", [
    ("/api/traces", {"GET", "HEAD", "POST", "OPTIONS"}),
    ("/api/traces/abcdefghijklmnop", {"GET", "HEAD", "DELETE", "OPTIONS"}),
    ("/static/app.css", {"GET", "HEAD", "OPTIONS"}),
])
def test_options_lists_every_method_of_the_path(client, path, want):
    r = client.options(path)
    assert r.status_code == 204
    assert set(r.headers["allow"].split(", ")) == want


def test_a_wrong_method_answers_405_with_the_full_allow_header(client):
    r = client.put("/api/traces")
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "OPTIONS"}
    assert r.json()["error"]["code"] == "method_not_allowed"


def test_openapi_documents_error_statuses_and_the_upload_body(client):
    doc = client.get("/openapi.json").json()
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]
    upload = doc["paths"]["/api/traces"]["post"]
    assert {"400", "403", "413", "422"} <= set(upload["responses"])
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert upload["requestBody"]["content"]["multipart/form-data"]["schema"]["required"] == ["file"]
    meta = doc["paths"]["/api/traces/{trace_id}"]["get"]
    assert {"404", "409"} <= set(meta["responses"])
    # and the server really answers that shape for them
    r = client.get("/api/traces/abcdefghijklmnop")
    assert r.status_code == 404 and set(r.json()["error"]) == {"code", "message"}
