"""A trace dropped on the list page, or a row's link clicked, opens in place (web/static/pages/in_place.js): the list
page has loaded the trace page's modules while idle, takes the trace page's HTML, styles and URL once the upload
is answered, and runs its main() -- the same page as one navigated to, without the navigation. In Chromium against
a real server.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import _ui
from test_api_upload import _send_in_two, chrome_json
from test_ui_ingesting import _ingesting_row

ROOT = Path(__file__).resolve().parent.parent
KINETO = ROOT / "sample_traces" / "chrome" / "kineto"
SAMPLED = KINETO / "sampled-rank1-small.json.gz"  # HTA's sampled rank 1 (sample_traces/ATTRIBUTION.md)
MINITOY = KINETO / "mi250-rocm-minitoy.json.gz"

pytestmark = pytest.mark.skipif(not Path(_ui.CHROMIUM).exists(), reason=f"chromium not found at {_ui.CHROMIUM}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, live_server_factory):
    live = live_server_factory(tmp_path_factory.mktemp("in-place-store"))
    yield live.url
    live.stop()


def _drop(page, path: Path) -> None:
    _ui.drop_file(page, path.name, path.read_bytes())


def _dropped_in_place(page, path: Path) -> None:
    """`path` dropped on the list page, its trace drawn in the same document."""
    _ui.list_page_ready(page)
    _drop(page, path)
    page.wait_for_url("**/t/*", timeout=60000)
    _ui.wait_idle(page, timeout_ms=30000)
    assert page.evaluate("() => window.__listDocument") is True, "the page navigated instead of opening in place"


def _drawn(page) -> dict:
    """The rows on screen (track, css-px y and height), the view and the stylesheets, by the documented hooks."""
    return page.evaluate("""() => ({
        rows: window.acceltrace.timeline.visibleRows().filter(r => r.row.kind === 'track')
            .map(r => [r.row.track.track_id, r.y, r.row.h]),
        view: window.acceltrace.view,
        styles: [...document.styleSheets].map(s => s.href.split('/').pop()).sort(),
    })""")


def test_a_trace_dropped_on_the_list_page_opens_in_place_as_the_page_itself_draws_it(browser, server):
    with _ui.new_page(browser, server) as page:
        _dropped_in_place(page, SAMPLED)
        assert page.title() == f"{SAMPLED.name} · acceltrace"
        assert page.evaluate("() => document.body.className") == "trace-page"
        assert page.evaluate("() => document.querySelectorAll('#drop-overlay').length") == 1
        assert page.locator("#traces").count() == 0  # the list's table is gone with its body
        in_place = _drawn(page)
        _ui.shot(page, "opened-in-place")
        assert not page.errors, page.errors
        url = page.url
        # the trace page loaded by its URL draws the same tracks over the same view, with the same styles
        with _ui.new_page(browser, server) as fresh:
            fresh.goto(url)
            _ui.wait_idle(fresh, timeout_ms=30000)
            assert _drawn(fresh) == in_place
            assert not fresh.errors, fresh.errors
        # its Views button (installed by main(), not by a module's first evaluation on the list page)
        page.click("#open-views")
        page.wait_for_url("**/views?*", timeout=30000)


def test_back_from_a_trace_opened_in_place_loads_the_list(browser, server):
    with _ui.new_page(browser, server) as page:
        _dropped_in_place(page, MINITOY)
        page.go_back()
        page.wait_for_function("() => document.body.classList.contains('index-page')"
                               " && document.querySelectorAll('#traces tbody tr').length > 0", timeout=30000)
        assert page.evaluate("() => window.__listDocument") is None  # loaded again, not a trace page's leftover
        assert MINITOY.name in page.locator("#traces").inner_text()
        assert not page.errors, page.errors


def test_a_file_dropped_on_a_trace_opened_in_place_is_uploaded_once_and_opened_by_navigation(browser, server):
    with _ui.new_page(browser, server) as page:
        _dropped_in_place(page, MINITOY)
        first = page.url.split("#")[0]
        uploads: list[str] = []
        page.on("request", lambda r: uploads.append(r.url) if r.method == "POST" and "/api/traces" in r.url
                and "/query" not in r.url else None)
        _drop(page, SAMPLED)
        page.wait_for_function("() => window.__listDocument === undefined", timeout=60000)  # a navigation
        _ui.wait_idle(page, timeout_ms=30000)
        assert page.url.split("#")[0] != first
        assert page.title() == f"{SAMPLED.name} · acceltrace"
        assert len(uploads) == 1, uploads
        assert not page.errors, page.errors


def test_a_drop_navigates_where_the_trace_page_cannot_be_fetched_in_place(browser, server):
    with _ui.new_page(browser, server) as page:
        _ui.list_page_ready(page)
        failed: list[str] = []

        def fail_fetch(route):  # the page's fetch of the trace page's HTML fails; its navigation does not
            if route.request.resource_type == "fetch":
                failed.append(route.request.url)
                route.fulfill(status=503, body="busy")
            else:
                route.continue_()

        page.route("**/t/*", fail_fetch)
        _drop(page, MINITOY)
        page.wait_for_function("() => window.__listDocument === undefined", timeout=60000)
        _ui.wait_idle(page, timeout_ms=30000)
        assert failed, "the in-place open did not fetch the trace page"
        assert page.evaluate("() => document.body.className") == "trace-page"
        assert not page.errors, page.errors


def test_a_traces_link_clicked_in_the_list_opens_in_place_and_a_modified_click_does_not(browser, server):
    with _ui.new_page(browser, server) as page:
        _ui.list_page_ready(page)
        link = page.locator("#traces a", has_text=SAMPLED.name)
        link.wait_for(timeout=30000)
        href = link.get_attribute("href")
        with page.context.expect_page() as other:  # Ctrl+click: a new tab, as a link does; this page stays
            link.click(modifiers=["Control"])
        other.value.close()
        assert page.evaluate("() => document.body.className") == "index-page"
        link.click()
        page.wait_for_url(f"**{href}*", timeout=30000)
        _ui.wait_idle(page, timeout_ms=30000)
        assert page.evaluate("() => window.__listDocument") is True
        assert page.title() == f"{SAMPLED.name} · acceltrace"
        assert not page.errors, page.errors


def test_an_upload_answered_while_its_trace_ingests_opens_in_place_and_draws_once_published(browser, server):
    """The upload box given a 202 (the trace still ingesting) opens that trace in place: its progress, then its
    timeline once published, in the same document. The 202 is the answer the server gives an upload it has not
    finished in 2 s; here it names a real upload held half-way."""
    body = chrome_json("in-place-early", 40_000)
    release, out = threading.Event(), {}
    sender = threading.Thread(target=_send_in_two, args=(server, "early-in-place.json", body, release, out))
    sender.start()
    try:
        with _ui.new_page(browser, server) as page:
            _ui.list_page_ready(page)
            row = _ingesting_row(server, out)
            page.route("**/api/traces?*", lambda route: route.fulfill(
                status=202, content_type="application/json", body=json.dumps({"id": row["id"], "status": "ingesting"}))
                if route.request.method == "POST" else route.continue_())
            _drop(page, MINITOY)
            page.locator("#timeline .ingest-wait[role=status]").wait_for(timeout=30_000)
            assert page.url.split("#")[0].endswith(f"/t/{row['id']}")
            assert page.evaluate("() => window.__listDocument") is True
            release.set()
            _ui.wait_idle(page, timeout_ms=120_000)
            assert page.evaluate("() => window.__listDocument") is True, "the page reloaded"
            assert page.evaluate("() => window.acceltrace.timeline.meta.counts.slices") == 40_000
            assert not page.errors, page.errors
    finally:
        release.set()
        sender.join(120)
    assert out["r"].status_code in (201, 202), out["r"].text


def test_forward_to_a_trace_opened_in_place_loads_it_and_the_list_keeps_its_title(browser, server):
    with _ui.new_page(browser, server) as page:
        _dropped_in_place(page, MINITOY)
        cdp = page.context.new_cdp_session(page)
        entries = cdp.send("Page.getNavigationHistory")["entries"]
        assert [e["title"] for e in entries[-2:]] == ["acceltrace", f"{MINITOY.name} · acceltrace"]
        page.go_back()
        page.wait_for_function("() => document.body.classList.contains('index-page')", timeout=30000)
        page.evaluate("() => { window.__listDocument = true; }")
        page.go_forward()
        page.wait_for_function("() => document.body.classList.contains('trace-page')", timeout=30000)
        _ui.wait_idle(page, timeout_ms=30000)
        assert page.evaluate("() => window.__listDocument") is None  # loaded, not the list at the trace's URL
        assert page.title() == f"{MINITOY.name} · acceltrace"
        assert not page.errors, page.errors


def test_a_double_click_on_a_row_opens_its_trace_once(browser, server):
    with _ui.new_page(browser, server) as page:
        _ui.list_page_ready(page)
        link = page.locator("#traces a", has_text=MINITOY.name).first
        link.wait_for(timeout=30000)
        streams: list[str] = []
        page.on("request", lambda r: streams.append(r.url) if r.url.endswith("/analysis/events") else None)
        before = page.evaluate("() => history.length")
        link.dblclick()
        page.wait_for_url("**/t/*", timeout=30000)
        _ui.wait_idle(page, timeout_ms=30000)
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.__listDocument") is True
        assert page.evaluate("() => history.length") == before + 1
        assert len(streams) == 1, streams  # one main(): one page's requests
        view = page.evaluate("() => window.acceltrace.view")
        page.keyboard.press("w")  # keys reach the page on screen
        _ui.wait_idle(page)
        assert page.evaluate("() => window.acceltrace.view") != view
        assert not page.errors, page.errors
