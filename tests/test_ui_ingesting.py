"""A trace's page opened while the trace is ingested: it shows the ingest's progress and becomes the timeline
when the trace is published, without a reload (pages/trace.js `untilIngested`); an upload still ingesting
(202) opens that page at once (panels/upload.js)."""

from __future__ import annotations

import threading
import time

import httpx

from test_api_upload import _send_in_two, chrome_json


def _ingesting_row(url: str, out: dict) -> dict:
    with httpx.Client(base_url=url, timeout=30) as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = c.get("/api/traces").json()["traces"]
            if rows and rows[0]["status"] == "ingesting" and (rows[0].get("progress") or 0) > 0:
                return rows[0]
            time.sleep(0.05)
    raise AssertionError(f"no ingesting row: {rows} {out}")


def test_a_page_opened_while_its_trace_ingests_waits_and_then_draws_without_a_reload(browser, live_server_factory,
                                                                                        tmp_path):
    server = live_server_factory(tmp_path / "store")
    body = chrome_json("opened-early", 40_000)
    release, out = threading.Event(), {}
    sender = threading.Thread(target=_send_in_two, args=(server.url, "early.json", body, release, out))
    sender.start()
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=server.url)
    try:
        row = _ingesting_row(server.url, out)  # half the body is in, the rest held back
        pg = ctx.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        streams: list[str] = []
        pg.on("request", lambda r: streams.append(r.url) if r.url.split("?")[0].endswith("/progress") else None)
        pg.goto(f"/t/{row['id']}")
        box = pg.locator("#timeline .ingest-wait[role=status]")
        box.wait_for(timeout=30_000)
        assert pg.locator("#timeline").get_attribute("data-state") == "ingesting"
        # the share read of the declared body (progress > 0 once the row was seen)
        pg.wait_for_function("() => /Ingesting this trace… \\d+ %/.test("
                             "document.querySelector('#timeline .ingest-wait').textContent)", timeout=30_000)
        pg.evaluate("() => { window.__same_document = true; }")  # gone if the page reloads
        assert "r" not in out  # the upload is still open
        release.set()
        pg.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=120_000)
        assert pg.evaluate("() => window.__same_document === true"), "the page reloaded"
        assert box.count() == 0 and pg.locator("#timeline canvas.tracks").count() == 1
        assert pg.evaluate("() => window.acceltrace.timeline.meta.counts.slices") == 40_000
        # its stream said the width its tracks have: the server built its first tiles as the trace got ready
        tracks_px = pg.evaluate("() => window.acceltrace.timeline.view.width_css_px")
        assert streams and streams[0].endswith(f"/progress?view_px={tracks_px}"), (streams, tracks_px)
        assert not errors, errors
    finally:
        release.set()
        sender.join(120)
        ctx.close()
    assert out["r"].status_code in (201, 202), out["r"].text


def test_a_page_opened_while_its_trace_ingests_shows_why_it_failed(browser, live_server_factory, tmp_path):
    server = live_server_factory(tmp_path / "store")
    good = chrome_json("fails-late", 40_000)
    body = good[: len(good) // 2 + 1000] + b"this is not json" + good[len(good) // 2 + 1000:]
    release, out = threading.Event(), {}
    sender = threading.Thread(target=_send_in_two, args=(server.url, "late.json", body, release, out))
    sender.start()
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=server.url)
    try:
        row = _ingesting_row(server.url, out)
        pg = ctx.new_page()
        pg.goto(f"/t/{row['id']}")
        pg.locator("#timeline .ingest-wait").wait_for(timeout=30_000)
        release.set()
        alert = pg.locator("#timeline .fatal[role=alert]")
        alert.wait_for(timeout=120_000)
        text = alert.text_content()
        assert "failed to ingest" in text and "late.json" in text and "byte" in text, text
    finally:
        release.set()
        sender.join(120)
        ctx.close()
