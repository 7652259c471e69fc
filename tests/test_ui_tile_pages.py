"""Browser test of depth pages (issue 15): a group of tracks 42 deep is drawn from tiles that each carry
four depths, fetched only for the depth rows on screen, with the fold row drawn from a page's fold
sections; unfolding and scrolling down fetches the deeper pages and draws those rows exactly.

Real Chromium (Playwright) against `acceltrace serve` on loopback; the trace is tests/_deep_trace.py's.
What is drawn is read from the canvas pixels and the documented hooks (window.acceltrace.timeline).
"""

from __future__ import annotations

import re

import pytest

import _ui
from _deep_trace import DEEP_DEPTH, build_deep_trace
from acceltrace.store.catalog import Store

FOLD_RGB = (0x8A, 0x91, 0x9E)  # web/static/timeline/frame.js theme.fold
BACKGROUND_TOL = 6


@pytest.fixture(scope="module")
def deep_server(tmp_path_factory, live_server_factory):
    root = tmp_path_factory.mktemp("deep-ui")
    tid = build_deep_trace(Store(root))
    return live_server_factory(root).url, tid


def _pixel(page, x, y):
    return tuple(page.evaluate("""([x, y]) => {
        const c = document.querySelector('#timeline canvas.tracks'), d = window.devicePixelRatio || 1;
        const px = c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1);
        return Array.from(px.data.slice(0, 3)); }""", [x, y]))


def _x_of(page, rel_ns):
    return page.evaluate("""(t) => { const tl = window.acceltrace.timeline, v = tl.view;
        return window.acceltrace.names_px + (t - v.start_ns) / v.span_ns * v.width_css_px; }""", rel_ns)


def _track_y(page, track_id):
    return next(t for t in page.evaluate("() => window.acceltrace.tracks") if t["id"] == track_id)["y"]


def _row_y(page, track_id, row):
    return _track_y(page, track_id) + 3 + row * 18 + 9  # TRACK_PAD_PX, ROW_PX: the middle of that row


def _pages(urls):
    return {int(m.group(1)) for u in urls if (m := re.search(r"[?&]page=(\d+)", u))}


def test_deep_tracks_fetch_the_pages_on_screen_and_draw_the_fold_from_one(browser, deep_server):
    server, tid = deep_server
    with _ui.new_page(browser, server, width=1400, height=900, timeout_ms=20000) as page:
        urls = []
        page.on("request", lambda r: urls.append(r.url) if "/api/traces/" in r.url and "/tiles/" in r.url else None)
        page.goto(f"/t/{tid}")
        _ui.wait_idle(page)
        assert urls and all("page=" in u for u in urls), urls[:5]
        first = page.evaluate("() => window.acceltrace.tracks")[0]
        assert first["depths"] == 24  # DEFAULT_ROWS shown, the other 18 depths in the fold row
        # two 450 px tracks on screen, 24 depth rows each: pages 0-5 (page 5 also holds the fold's sections)
        assert _pages(urls) == set(range(6)), sorted(_pages(urls))
        # zoom into the first stack: depth 24 covers [24, 75) us, and the fold row draws exactly that
        page.evaluate("() => { window.acceltrace.timeline.view.set(0, 200000); }")
        _ui.wait_idle(page)
        tid0 = first["id"]
        fold_y = _row_y(page, tid0, 24)
        assert _pixel(page, _x_of(page, 50_000), fold_y) == FOLD_RGB
        assert _pixel(page, _x_of(page, 10_000), fold_y) != FOLD_RGB  # nothing that deep at 10 us
        assert _pixel(page, _x_of(page, 80_000), fold_y) != FOLD_RGB
        folds = page.evaluate(f"""() => window.acceltrace.timeline.piecesFor({tid0})
            .filter(p => p.tile.fold_from === 24).map(p => p.tt.fold_n)""")
        assert folds and max(folds) > 0
        _ui.shot(page, "tile-pages-folded")
        # depth 20 is drawn from page 5 with its slices' own colour, not the fold's
        d20 = _pixel(page, _x_of(page, 50_000), _row_y(page, tid0, 20))
        assert d20 != FOLD_RGB and max(abs(a - b) for a, b in zip(d20, (255, 255, 255))) > BACKGROUND_TOL
        # unfold every depth and scroll to the bottom of the track: the deepest pages come, no more
        page.evaluate(f"""() => {{ const tl = window.acceltrace.timeline;
            tl.layout.setDepths({tid0}, {DEEP_DEPTH + 2}); tl.relayout();
            tl.revealTrack({tid0}, {DEEP_DEPTH + 1}); }}""")
        _ui.wait_idle(page)
        assert max(_pages(urls)) == (DEEP_DEPTH + 1) // 4
        depths = page.evaluate(f"""() => {{ const s = new Set();
            for (const p of window.acceltrace.timeline.piecesFor({tid0})) for (const d of p.tt.depth) s.add(d);
            return [...s]; }}""")
        assert DEEP_DEPTH in depths  # the short slices at depth 40, exact at this zoom
        # a short slice of depth 40 at 39.5 us + 1.2 us * j is drawn on its own row
        # (1.3 px wide at this zoom: look at the pixels around its middle)
        x = _x_of(page, 39_500 + 1_200 * 3 + 100)
        px = [_pixel(page, x + dx, _row_y(page, tid0, DEEP_DEPTH)) for dx in (-2, -1, 0, 1, 2)]
        _ui.shot(page, "tile-pages-unfolded")
        assert any(max(abs(a - b) for a, b in zip(p, (255, 255, 255))) > BACKGROUND_TOL for p in px), px
        assert not page.errors, page.errors


def test_the_first_tiles_do_not_wait_for_the_tile_worker_and_the_worker_takes_the_rest(browser, deep_server):
    """The page's first tiles are fetched and decoded on the main thread while the tile worker loads its
    modules (its start was ~0.1 s of a drop's time to the first tile); once it says it is ready, the
    worker fetches them. The page's own fetch is counted (a worker has a fetch of its own)."""
    server, tid = deep_server
    with _ui.new_page(browser, server, width=1400, height=900, timeout_ms=20000) as page:
        seen = []
        page.on("request", lambda r: seen.append(r.url) if "/tiles/" in r.url and "/api/traces/" in r.url else None)
        page.add_init_script("""window.__tile_fetches = 0; const f = window.fetch;
            window.fetch = (u, ...a) => { if (String(u).includes('/tiles/')) window.__tile_fetches++; return f(u, ...a); };""")
        page.goto(f"/t/{tid}")
        _ui.wait_idle(page)
        main_js = "() => window.__tile_fetches"
        first = page.evaluate(main_js)
        assert first > 0  # the first tiles: on the main thread, not after the worker's start
        # once the worker is up (soon: a slow machine gets a few tries), new tiles are its fetches, not the page's
        span = page.evaluate("() => window.acceltrace.timeline.view.span_ns") / 64
        for k in range(12):
            page.wait_for_timeout(300)
            before, main_before = len(seen), page.evaluate(main_js)
            page.evaluate(f"() => window.acceltrace.timeline.view.set({k * span}, {(k + 1) * span})")
            _ui.wait_idle(page)
            assert len(seen) > before  # a window not drawn yet: new tiles
            if page.evaluate(main_js) == main_before:
                break
        else:
            raise AssertionError("every tile was fetched on the main thread: the worker never took over")
        assert not page.errors, page.errors
