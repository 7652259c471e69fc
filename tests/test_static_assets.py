"""The pages' files under a versioned path the browser keeps (server/static_assets.py), and the list page's
prefetch of the trace page's files: a trace opened from the list loads no script or style over the network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import _ui
from acceltrace.server import static_assets
from acceltrace.server.static_assets import IMMUTABLE, Assets, module_graph, version

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "web" / "static"


def test_the_version_follows_every_file(tmp_path):
    web = tmp_path / "static"
    shutil.copytree(STATIC, web)
    v = version(web)
    assert re.fullmatch(r"[0-9a-f]{16}", v) and v == version(web)
    (web / "lib" / "util.js").write_text((web / "lib" / "util.js").read_text() + "\n// changed\n")
    changed = version(web)
    assert changed != v
    (web / "lib" / "util.js").rename(web / "lib" / "util2.js")  # the same bytes under another name
    assert version(web) not in (v, changed)
    assert version(tmp_path / "missing") == version(tmp_path / "missing")


def test_the_trace_pages_module_graph_is_every_module_it_loads(tmp_path):
    mods = module_graph(STATIC)
    assert mods[0] == "pages/trace_page.js" and len(mods) == len(set(mods))
    # the tile worker and what it imports (new URL("./worker.js", import.meta.url)), multi-line imports
    assert {"pages/trace.js", "tiles/worker.js", "tiles/decode.js", "timeline/timeline.js", "panels/upload.js",
            "pages/in_place.js"} <= set(mods)
    assert all((STATIC / m).is_file() for m in mods)
    # a graph by hand: a dynamic import, a reference outside the folder, one to a missing file, a cycle
    web = tmp_path / "s"
    (web / "pages").mkdir(parents=True)
    (web / "pages" / "trace.js").write_text('import { a } from "../a.js";\nimport(\'./lazy.js\');\n'
                                             'import "../../outside.js"; import "./gone.js";\n')
    (web / "a.js").write_text('export {\n  b,\n} from "./pages/trace.js";\n')
    (web / "pages" / "lazy.js").write_text("export const x = 1;\n")
    (tmp_path / "outside.js").write_text("")
    assert module_graph(web, "pages/trace.js") == ["pages/trace.js", "a.js", "pages/lazy.js"]


def test_versioned_files_are_cached_for_good_and_pages_name_only_them(api, trace_store):
    assets = Assets(STATIC)
    # the running app's version (the session's app was created earlier: the files may have changed since)
    assets.prefix = api.app.state.templates.env.globals["static"]
    r = api.get(f"{assets.prefix}/pages/trace.js")
    assert r.status_code == 200 and r.headers["cache-control"] == IMMUTABLE
    assert r.content == (STATIC / "pages" / "trace.js").read_bytes()
    plain = api.get("/static/pages/trace.js")  # the plain path still answers, without the long cache
    assert plain.status_code == 200 and "cache-control" not in plain.headers
    assert api.get(f"{static_assets.PREFIX}/0123456789abcdef/pages/trace.js").status_code == 404  # another version
    tid = trace_store.ids["synthetic"]
    for url in ("/", f"/t/{tid}", f"/t/{tid}/views"):
        page = api.get(url).text
        refs = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
        assert refs and all(ref.startswith(assets.prefix + "/") for ref in refs), url
        for ref in refs:
            assert api.get(ref).status_code == 200, ref
    index = api.get("/").text
    prefetched = set(re.findall(r'rel="prefetch" href="([^"]+)"', index))
    assert prefetched == {f"{assets.prefix}/{m}" for m in assets.trace_modules + assets.trace_styles}


def test_a_trace_opened_from_the_list_loads_its_files_from_the_cache(browser, a100_server):
    """Opened in place from the list (pages/in_place.js) and then by its URL, the trace page fetches none of its
    files over the network again: the list page prefetched them while idle."""
    static = """(from) => performance.getEntriesByType('resource').slice(from)
        .filter(r => r.name.includes('/static/')).map(r => [new URL(r.name).pathname, r.transferSize])"""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=a100_server)
    try:
        pg = ctx.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        _ui.list_page_ready(pg)  # the prefetches and the trace page's modules are loaded
        pg.wait_for_selector("#traces tbody a")
        seen = pg.evaluate("() => performance.getEntriesByType('resource').length")
        href = pg.get_attribute("#traces tbody a", "href")
        pg.click("#traces tbody a")  # in place: no navigation
        pg.wait_for_url(f"**{href}*")
        pg.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=60_000)
        assert not errors and pg.evaluate("() => !!window.acceltrace && !!window.acceltrace.timeline")
        opened = pg.evaluate(static, seen)
        assert opened, "the page opened in place loaded nothing (its styles and tile worker are new to the list)"
        assert not [path for path, size in opened if size > 0], f"fetched again though prefetched: {opened}"
        # the same page navigated to (a reload, a link from elsewhere in this browser): every file from the cache
        pg.goto(href)
        pg.wait_for_function("() => document.getElementById('timeline').dataset.state === 'idle'", timeout=60_000)
        loaded = pg.evaluate(static, 0)
        assert not errors
        assert len(loaded) >= 30, loaded  # every module and style of the trace page
        over_network = [path for path, size in loaded if size > 0]
        assert not over_network, f"fetched again though prefetched: {over_network}"
        assert all(path.startswith(static_assets.PREFIX + "/") for path, _ in loaded)
    finally:
        ctx.close()


def test_a_file_changed_under_a_running_server_is_not_cached_under_its_old_version(tmp_path):
    from fastapi.testclient import TestClient

    from acceltrace.server.app import create_app

    web = tmp_path / "web"
    shutil.copytree(ROOT / "web", web)
    app = create_app(tmp_path / "store", web_dir=web)
    with TestClient(app) as c:
        prefix = Assets(web / "static").prefix
        assert c.get(f"{prefix}/lib/util.js").headers["cache-control"] == IMMUTABLE
        util = web / "static" / "lib" / "util.js"
        util.write_text(util.read_text() + "\n// edited while served\n")
        r = c.get(f"{prefix}/lib/util.js")
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache" and r.text.endswith("served\n")
