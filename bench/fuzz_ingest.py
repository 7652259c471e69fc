"""Mutation fuzzing of every ingester, from the real samples in sample_traces/.

Each round takes a seed file of one format, mutates it with a mutator that knows the format
(Chrome JSON: field values, types, phases and keys; Nsight SQLite: cell values, dropped tables
and rows; .atrace and .actr: words of a chunk with its checksum recomputed, chunks dropped,
repeated or cut; archives: a container around a mutated member, then its bytes), ingests it
with the product's pipeline, and, when it was accepted, runs the analysis passes and asks the
server (in process) for its metadata, summary, findings, a tile, the tree and the rollup.

A round is a bug when ingest answers "internal error", when an exception escapes, when a refusal
does not name the file, when a failed ingest leaves a trace or a temp file visible, when a pass
fails on an accepted trace, or when a route answers 5xx. Every other outcome (accepted with or
without warnings and drops, or refused with a clear message) is what we promise.

    .venv/bin/python bench/fuzz_ingest.py                       # 300 rounds per format
    .venv/bin/python bench/fuzz_ingest.py --count 6 --seed 7    # what tests/test_fuzz_ingest.py runs
    .venv/bin/python bench/fuzz_ingest.py --formats nsys --keep /tmp/fuzz-bugs

Formats: chrome (the compiled scanner where built), chrome-python (the pure-Python path),
archive, nsys, atrace, actr. Exit status 0 when no round was a bug, 1 otherwise (each bug's input
is written under --keep when given). The run is one process: a crash of a compiled extension
ends it with a signal, which the test reads as a failure too.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import io
import json
import os
import random
import shutil
import sqlite3
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
FORMATS = ("chrome", "chrome-python", "archive", "nsys", "atrace", "actr")

# values that have broken parsers before: type confusion, int64 edges, float edges, odd strings
INT_EDGES = [0, 1, -1, 2**31 - 1, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), -(2**62),
             9223372036854775, -10**18, 10**18]
JSON_VALUES = INT_EDGES + [None, True, False, 0.5, -0.0, 1e308, -1e308, 1e-300, "", "x", "1e3", "-5",
                           "NaN", "\u202e<b>", "\x00", [], [1, 2], {}, {"a": 1}, {"name": None}]
CHROME_KEYS = ["ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id", "bind_id", "s", "tts",
               "bp", "flow_in", "flow_out", "id2", "scope"]
CHROME_ARGS = ["External id", "correlation", "bytes", "stream", "device", "context", "Input Dims",
               "name", "labels", "sort_index", "queued", "cbid", "memory bandwidth (GB/s)"]
PHASES = list("XBEiIbenCMsftPOND(){}") + ["", "XX", 1]


def _chrome_seeds() -> list[dict]:
    """Small documents cut from real Kineto traces (the first events of each), and the bad-input corpus."""
    out = []
    for name, keep in (("mi250-rocm-minitoy.json.gz", 120), ("sampled-rank0-small.json.gz", 160),
                       ("vllm-decode-graph-capture.json.gz", 200), ("v100-with-gpu-metrics-counters.json", 120),
                       ("a100-rank0-memcpy.json.gz", 160)):
        p = SAMPLES / "chrome" / "kineto" / name
        if not p.exists():
            continue
        raw = gzip.decompress(p.read_bytes()) if name.endswith(".gz") else p.read_bytes()
        doc = json.loads(raw)
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            ev = doc["traceEvents"]
            # keep the metadata events and a run of the rest, so tracks, flows and kernels survive
            meta = [e for e in ev if isinstance(e, dict) and e.get("ph") == "M"][:40]
            rest = [e for e in ev if not (isinstance(e, dict) and e.get("ph") == "M")]
            at = len(rest) // 3
            doc = dict(doc, traceEvents=meta + rest[at:at + keep])
        out.append(doc)
    return out


def _mutate_chrome(rng: random.Random, doc) -> object:
    doc = copy.deepcopy(doc)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list) or not events:
        return doc
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        e = rng.choice(events)
        if not isinstance(e, dict):
            continue
        if r < 0.4:
            e[rng.choice(CHROME_KEYS)] = rng.choice(JSON_VALUES)
        elif r < 0.6:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            args[rng.choice(CHROME_ARGS)] = rng.choice(JSON_VALUES)
            e["args"] = args
        elif r < 0.7:
            e["ph"] = rng.choice(PHASES)
        elif r < 0.8 and e:
            e.pop(rng.choice(list(e)), None)
        elif r < 0.87:
            events.insert(rng.randrange(len(events) + 1), copy.deepcopy(e))
        elif r < 0.92:
            rng.shuffle(events)
        elif isinstance(doc, dict):
            doc[rng.choice(["deviceProperties", "displayTimeUnit", "distributedInfo", "baseTimeNanoseconds",
                            "traceName", "schemaVersion"])] = rng.choice(JSON_VALUES)
    return doc


def _mutate_bytes(rng: random.Random, b: bytes, edits: int = 6) -> bytes:
    b = bytearray(b)
    for _ in range(rng.randint(1, edits)):
        if not b:
            break
        i = rng.randrange(len(b))
        r = rng.random()
        if r < 0.3:
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.55:
            del b[i:i + rng.randint(1, 16)]
        elif r < 0.8:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif r < 0.9:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        else:
            del b[i:]
    return bytes(b)


def _chrome_bytes(rng: random.Random, doc) -> bytes:
    text = json.dumps(_mutate_chrome(rng, doc)).encode()  # NaN/Infinity stay: not JSON, must be refused
    return _mutate_bytes(rng, text, 3) if rng.random() < 0.15 else text


def _archive_bytes(rng: random.Random, doc) -> tuple[bytes, str]:
    member = _chrome_bytes(rng, doc)
    kind = rng.choice(["gz", "zip", "tar.gz", "gz.gz"])
    if kind == "gz":
        data = gzip.compress(member, 1)
    elif kind == "gz.gz":
        data = gzip.compress(gzip.compress(member, 1), 1)
    elif kind == "zip":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("rank0.json", member)
            if rng.random() < 0.5:
                z.writestr(rng.choice(["../up.json", "b/rank1.json", "notes.txt"]), _chrome_bytes(rng, doc))
        data = buf.getvalue()
    else:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            info = tarfile.TarInfo("run/rank0.json")
            info.size = len(member)
            t.addfile(info, io.BytesIO(member))
        data = buf.getvalue()
    if rng.random() < 0.5:
        data = _mutate_bytes(rng, data, 4)
    return data, {"gz": "trace.json.gz", "gz.gz": "trace.json.gz.gz", "zip": "trace.zip", "tar.gz": "trace.tar.gz"}[kind]


# -- binary chunked formats: mutate inside a chunk and recompute its checksum ------------------

def _chunks(b: bytes, first: int, header, length_at: int) -> list[tuple[int, int, int]]:
    """(header offset, payload offset, payload length) of each whole chunk after `first` bytes."""
    out, at = [], first
    while at + header.size <= len(b):
        n = header.unpack_from(b, at)[length_at]
        if at + header.size + n > len(b):
            break
        out.append((at, at + header.size, n))
        at += header.size + n
    return out


def _mutate_chunked(rng: random.Random, b: bytes, first: int, header, length_at: int, repack) -> bytes:
    chunks = _chunks(b, first, header, length_at)
    if not chunks or rng.random() < 0.1:
        return _mutate_bytes(rng, b)
    out = bytearray(b)
    r = rng.random()
    h, p, n = rng.choice(chunks)
    if r < 0.6 and n >= 8:
        payload = bytearray(out[p:p + n])
        if payload[:1] == b"{" and rng.random() < 0.7:  # a JSON payload (header, metadata, note, tail)
            try:
                obj = json.loads(bytes(payload).rstrip(b" \x00"))
                obj = _mutate_json_obj(rng, obj)
                payload = bytearray(json.dumps(obj).encode())
                payload += b" " * (-len(payload) % 8)
            except ValueError:
                pass
        else:
            for _ in range(rng.randint(1, 6)):
                w = rng.randrange(max(1, len(payload) // 8)) * 8
                v = rng.choice(INT_EDGES + [rng.getrandbits(64) - (1 << 63)])
                size = rng.choice([8, 4]) if w + 8 <= len(payload) else 4
                if w + size <= len(payload):
                    payload[w:w + size] = (v % (1 << (8 * size))).to_bytes(size, "little")
        out[h:p + n] = repack(bytes(out[h:p]), bytes(payload))
    elif r < 0.75:
        del out[h:p + n]
    elif r < 0.9:
        out[h:h] = out[h:p + n]
    else:
        del out[h + rng.randrange(max(1, p + n - h)):]
    return bytes(out)


def _mutate_json_obj(rng: random.Random, obj):
    if isinstance(obj, dict) and obj:
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(list(obj))
            if isinstance(obj[key], (dict, list)) and obj[key] and rng.random() < 0.5:
                obj[key] = _mutate_json_obj(rng, obj[key])
            else:
                obj[key] = rng.choice(JSON_VALUES)
    elif isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        obj[i] = _mutate_json_obj(rng, obj[i]) if isinstance(obj[i], (dict, list)) else rng.choice(JSON_VALUES)
    return obj


def _atrace_bytes(rng: random.Random, seed: bytes) -> bytes:
    from acceltrace.formats.atrace import layout as L

    def repack(head: bytes, payload: bytes) -> bytes:
        ctype, stream, _, _ = L.CHUNK_HEADER.unpack(head)
        return L.CHUNK_HEADER.pack(ctype, stream, len(payload), zlib.crc32(payload)) + payload

    return _mutate_chunked(rng, seed, L.FILE_HEADER.size, L.CHUNK_HEADER, 2, repack)


def _actr_bytes(rng: random.Random, seed: bytes) -> bytes:
    from acceltrace.formats.actr import layout as L

    def repack(head: bytes, payload: bytes) -> bytes:
        tag, _, _ = L.CHUNK_HEADER.unpack(head)
        return L.CHUNK_HEADER.pack(tag, len(payload), zlib.crc32(payload)) + payload

    return _mutate_chunked(rng, seed, L.FILE_HEADER.size, L.CHUNK_HEADER, 1, repack)


def _nsys_file(rng: random.Random, seed: Path, out: Path) -> None:
    shutil.copyfile(seed, out)
    if rng.random() < 0.08:
        out.write_bytes(_mutate_bytes(rng, out.read_bytes(), 4))
        return
    db = sqlite3.connect(out)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for _ in range(rng.randint(1, 4)):
            t = rng.choice(tables)
            cols = [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')]
            r = rng.random()
            if r < 0.75 and cols:
                col = rng.choice(cols)
                value = rng.choice(INT_EDGES + [None, "x", "", 0.5, b"\x00\xff"])
                n = db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                if n:
                    where = "" if rng.random() < 0.2 else f" WHERE rowid IN (SELECT rowid FROM \"{t}\" ORDER BY random() LIMIT {rng.randint(1, 3)})"
                    db.execute(f'UPDATE "{t}" SET "{col}" = ?{where}', (value,))
            elif r < 0.85:
                db.execute(f'DELETE FROM "{t}" WHERE rowid % {rng.randint(2, 5)} = 0')
            elif t != "sqlite_sequence":
                db.execute(f'DROP TABLE "{t}"')
                tables.remove(t)
            if not tables:
                break
        db.commit()
    except sqlite3.Error:
        pass  # a mutation SQLite itself refuses (a constraint): keep what was done
    finally:
        db.close()


# -- one round -----------------------------------------------------------------------------

class Harness:
    def __init__(self, work: Path, analyze: bool = True, serve: bool = True):
        from acceltrace.store.catalog import Store

        self.work = work
        self.store = Store(work / "store")
        self.analyze = analyze
        self.client = None
        if serve:
            os.environ.setdefault("ACCELTRACE_ALLOWED_HOSTS", "testserver")
            from fastapi.testclient import TestClient
            from acceltrace.server.app import create_app

            self.client = TestClient(create_app(self.store.root), raise_server_exceptions=False)
            self.client.__enter__()

    def close(self) -> None:
        if self.client is not None:
            self.client.__exit__(None, None, None)

    def round(self, path: Path) -> tuple[str, str | None]:
        """('accepted'|'refused'|'bug', what went wrong for a bug)."""
        from acceltrace.ingest.pipeline import ingest_one

        before = {r["id"] for r in self.store.list()}
        try:
            res = ingest_one(self.store, [path], path.name)
        except BaseException as e:  # noqa: BLE001 - the harness reports anything that escapes
            return "bug", f"exception escaped ingest: {type(e).__name__}: {e}"
        if res.error:
            if "internal error" in res.error:
                return "bug", res.error
            if path.name not in res.error:
                return "bug", f"the refusal does not name the file: {res.error}"
            if {r["id"] for r in self.store.list()} - before:
                return "bug", "a refused trace is visible in the catalog"
            if [p for p in (self.store.root / "tmp").iterdir() if not p.name.endswith(".spill")]:
                return "bug", "a refused ingest left a temp file"
            return "refused", None
        tid = res.id
        try:
            return self._after(tid)
        finally:
            self.store.remove(tid)

    def _after(self, tid: str) -> tuple[str, str | None]:
        from acceltrace.analysis.runner import run_passes

        try:
            if self.analyze:
                report = run_passes(self.store, tid)
                failed = [s for s in report.statuses if s.status == "failed"]
                if failed:
                    return "bug", f"pass {failed[0].pass_id} failed: {failed[0].reason}"
        except Exception as e:  # noqa: BLE001
            return "bug", f"analysis raised {type(e).__name__}: {e}"
        if self.client is not None:
            bad = self._probe(tid)
            if bad:
                return "bug", bad
        return "accepted", None

    def _probe(self, tid: str) -> str | None:
        c = self.client
        meta = c.get(f"/api/traces/{tid}")
        if meta.status_code >= 500:
            return f"GET /api/traces/{{id}} answered {meta.status_code}: {meta.text[:300]}"
        level = 0
        if meta.status_code == 200:
            lod = meta.json().get("lod") or {}
            level = int(lod.get("max_level") or meta.json().get("max_level") or 0)
        for url in (f"/api/traces/{tid}/summary", f"/api/traces/{tid}/findings", f"/api/traces/{tid}/tiles/{level}/0",
                    f"/api/traces/{tid}/tree", f"/api/traces/{tid}/rollup", f"/api/traces/{tid}/events?limit=50",
                    f"/api/traces/{tid}/search?q=a"):
            r = c.get(url)
            if r.status_code >= 500:
                return f"GET {url.replace(tid, '{id}')} answered {r.status_code}: {r.text[:300]}"
        return None


def run(formats: list[str], count: int, seed: int, keep: Path | None, analyze: bool = True,
        serve: bool = True, out=sys.stdout) -> int:
    rng = random.Random(seed)
    chrome_docs = _chrome_seeds()
    atrace_seeds = [p.read_bytes() for p in sorted((SAMPLES / "atrace").rglob("*.atrace")) if "invalid" not in p.parts]
    actr_seeds = [p.read_bytes() for p in sorted((SAMPLES / "actr").rglob("*.actr")) if "invalid" not in p.parts]
    nsys_seeds = [p for p in sorted((SAMPLES / "nsys").rglob("*.sqlite")) if "invalid" not in p.parts]
    bugs = 0
    with tempfile.TemporaryDirectory(prefix="acceltrace-fuzz-") as tmp:
        work = Path(tmp)
        harness = Harness(work, analyze=analyze, serve=serve)
        try:
            print(f"{'format':<14} {'rounds':>6} {'accepted':>8} {'refused':>7} {'bugs':>4} {'s/round':>8}", file=out)
            for fmt in formats:
                saved = os.environ.get("ACCELTRACE_CHROME_SCANNER")
                if fmt == "chrome-python":
                    os.environ["ACCELTRACE_CHROME_SCANNER"] = "python"
                tally = {"accepted": 0, "refused": 0, "bug": 0}
                t0 = time.perf_counter()
                for k in range(count):
                    path = work / "in" / f"{fmt}-{seed}-{k}"
                    path.mkdir(parents=True, exist_ok=True)
                    if fmt in ("chrome", "chrome-python"):
                        path = path / "trace.json"
                        path.write_bytes(_chrome_bytes(rng, rng.choice(chrome_docs)))
                    elif fmt == "archive":
                        data, name = _archive_bytes(rng, rng.choice(chrome_docs))
                        path = path / name
                        path.write_bytes(data)
                    elif fmt == "nsys":
                        path = path / "report.sqlite"
                        _nsys_file(rng, rng.choice(nsys_seeds), path)
                    elif fmt == "atrace":
                        path = path / "capture.atrace"
                        path.write_bytes(_atrace_bytes(rng, rng.choice(atrace_seeds)))
                    elif fmt == "actr":
                        path = path / "counters.actr"
                        path.write_bytes(_actr_bytes(rng, rng.choice(actr_seeds)))
                    else:
                        raise SystemExit(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
                    outcome, why = harness.round(path)
                    tally[outcome] += 1
                    if outcome == "bug":
                        bugs += 1
                        print(f"BUG {fmt} round {k} (seed {seed}): {why}", file=out)
                        if keep is not None:
                            keep.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(path, keep / f"{fmt}-{seed}-{k}-{path.name}")
                    shutil.rmtree(path.parent, ignore_errors=True)
                if fmt == "chrome-python":
                    if saved is None:
                        os.environ.pop("ACCELTRACE_CHROME_SCANNER", None)
                    else:
                        os.environ["ACCELTRACE_CHROME_SCANNER"] = saved
                dt = (time.perf_counter() - t0) / max(1, count)
                print(f"{fmt:<14} {count:>6} {tally['accepted']:>8} {tally['refused']:>7} {tally['bug']:>4} {dt:>8.2f}",
                      file=out, flush=True)
        finally:
            harness.close()
    print(f"{'ok' if not bugs else 'FAILED'}: {bugs} bug(s) in {count * len(formats)} rounds", file=out)
    return 1 if bugs else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300, help="rounds per format")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--keep", type=Path, default=None, help="write each bug's input here")
    ap.add_argument("--no-analyze", action="store_true", help="ingest only (faster; misses analysis bugs)")
    ap.add_argument("--no-serve", action="store_true", help="do not ask the server for the accepted traces")
    a = ap.parse_args(argv)
    return run([f.strip() for f in a.formats.split(",") if f.strip()], a.count, a.seed, a.keep,
               analyze=not a.no_analyze, serve=not a.no_serve)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
