"""The details panel with args too long to send whole (a profiler can put a 100 MB blob in one event's
args: drawn whole, the browser tab crashed): their start, their length and a download of all of it."""

from __future__ import annotations

import json
import urllib.request

from _ui import get_json, ingest_cli, new_page

BLOB = "x" * 300_000  # past the details' 262,144 characters


def test_args_too_long_to_draw_show_their_start_length_and_a_download(tmp_path, browser, live_server_factory):
    trace = tmp_path / "blob.json"
    events = [{"ph": "X", "name": "small", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"k": 1}},
              {"ph": "X", "name": "blob", "pid": 1, "tid": 1, "ts": 5, "dur": 2, "args": {"blob": BLOB}}]
    trace.write_text(json.dumps({"traceEvents": events}))
    store = tmp_path / "store"
    ingest_cli(store, trace, "--no-analyze")
    live = live_server_factory(store)
    tid = get_json(f"{live.url}/api/traces")["traces"][0]["id"]
    sid = get_json(f"{live.url}/api/traces/{tid}/search?q=blob")["results"][0]["id"]
    with new_page(browser, live.url) as pg:
        pg.goto(f"/t/{tid}#sel={sid}")
        link = pg.wait_for_selector("text=Download all", timeout=30_000)
        note = pg.inner_text("#details, .details, body")
        want = len(json.dumps({"blob": BLOB}))
        assert f"{want:,} characters; the first 262,144 shown" in note
        href = link.get_attribute("href")
        assert href == f"/api/traces/{tid}/slices/{sid}/args"
        with urllib.request.urlopen(live.url + href, timeout=30) as r:
            assert json.loads(r.read()) == {"blob": BLOB}
        assert not pg.errors, pg.errors


def test_a_flow_off_the_chain_names_its_far_end(browser, live_server, trace_store):
    """A flow the correlation chain does not follow (here the kernel's dependency on a later call) names
    its far end in the details as the chain's do, by lane, name, time and length, not by its id alone."""
    tid, ids = trace_store.ids["chain"], trace_store.chain
    with new_page(browser, live_server.url) as pg:
        pg.goto(f"/t/{tid}#sel={ids['kernel']}")
        row = pg.wait_for_selector("#pane-details table.flows tbody tr:has-text('dependency')", timeout=30_000)
        end = row.query_selector("a.slice-link")
        assert end.get_attribute("data-slice-id") == str(ids["other_api"])
        text = end.inner_text()
        assert "other_api" in text and text.startswith("CPU") and f"slice {ids['other_api']}" not in text, text
        end.click()  # the link still goes there
        pg.wait_for_function("(id) => window.acceltrace && window.acceltrace.selected === id", arg=ids["other_api"])
        assert not pg.errors, pg.errors
