"""Fuzzes the compiled Chrome scanner (ingest/chrome/_scan.c) under AddressSanitizer and UBSan.

Builds the scanner with -fsanitize=address,undefined into a temporary folder, then feeds it
mutations (deleted, inserted and cut-off bytes) of the bad-input corpus
(sample_traces/chrome/invalid/*.json), of the scanner tests' quirks and of a slice of a
generated Kineto trace, in a child Python with the sanitizer runtime preloaded. Any memory
error or undefined behaviour aborts the child: the run fails with its report.

    .venv/bin/python bench/fuzz_scan.py                      # 200,000 inputs (a few minutes)
    .venv/bin/python bench/fuzz_scan.py --count 3000         # what tests/test_chrome_scanner.py runs

Exit status 0 and "ok <n> inputs, <k> accepted" when nothing was found; 2 when this machine
has no gcc with the sanitizers (nothing was tested; say so, do not read it as a pass).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_DRIVER = r"""
import random, sys
sys.path.insert(0, sys.argv[1])
import _scan
rng = random.Random(int(sys.argv[2]))
count = int(sys.argv[3])
seeds = []
for p in sys.argv[4:]:
    b = open(p, "rb").read()
    i = b.find(b"[")
    seeds.append(b[i:] if i >= 0 else b)
alphabet = b'{}[]",:\\ \t\n0123456789.-eEtruefalsn\x00\x1f\x80\xbf\xc3\xa9\xed\xa0\xf0\x9f\x98\xf4\x90'
accepted = 0
for k in range(count):
    b = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(0, 8)):
        i = rng.randrange(len(b) + 1)
        r = rng.random()
        if r < 0.35 and b:
            del b[min(i, len(b) - 1)]
        elif r < 0.7:
            b.insert(i, rng.choice(alphabet))
        elif r < 0.85:
            b[i:i] = b'\\u' + bytes(rng.choice(b'0123456789abcdefABCDEFdD') for _ in range(rng.randint(0, 4)))
        else:
            b = b[:i]
    data = bytes(b)
    # most inputs with a rows hint (what the chunks before suggest), absurd ones too: a hint sizes buffers only
    hint = rng.choice([0, 0, 0, 1, 7, 64, len(data), 1 << 40])
    out = _scan.scan(data, hint) if hint else _scan.scan(data)
    if out is not None:
        accepted += 1
        n, ev = out[0], out[1]
        # gather over the events the scanner reported, and over the whole buffer
        import array
        a = array.array("q"); a.frombytes(ev)
        starts = array.array("q", a[0::2]); lens = array.array("q", [e - s for s, e in zip(a[0::2], a[1::2])])
        _scan.gather(data, starts.tobytes(), lens.tobytes(), b",")
    # the reader's join (the copy without the GIL): parts of every buffer kind, and a part that is not one
    cut = rng.randrange(len(data) + 1)
    parts = [data[:cut], memoryview(data)[cut:], bytearray(data[:3]), b""]
    if _scan.join(parts) != b"".join(parts) or _scan.join([]) != b"":
        raise SystemExit("join differs from b''.join")
    try:
        _scan.join([data, cut])
        raise SystemExit("join took an int")
    except TypeError:
        pass
    try:  # slices outside the buffer must be refused, not read
        _scan.gather(data, (len(data)).to_bytes(8, "little", signed=True), (1).to_bytes(8, "little"), b"")
        raise SystemExit("gather read outside its buffer")
    except ValueError:
        pass
print(f"ok {count} inputs, {accepted} accepted")
"""


def build(tmp: Path, source: Path = ROOT / "ingest" / "chrome" / "_scan.c") -> tuple[Path, str] | None:
    """(the sanitized extension built from `source` into `tmp`, LD_PRELOAD value), or None when gcc or its
    sanitizers are missing. (tests/test_gather.py builds ingest/_gather.c with it.)"""
    inc = sysconfig.get_paths()["include"]
    out = tmp / (source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
           "-fno-sanitize-recover=undefined", f"-I{inc}", str(source), "-o", str(out)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=180)
        libs = [subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True,
                               check=True).stdout.strip() for lib in ("libasan.so", "libubsan.so")]
    except (OSError, subprocess.SubprocessError):
        return None
    if not all(Path(lib).is_absolute() and Path(lib).exists() for lib in libs):
        return None
    return out, " ".join(libs)


def seed_files(tmp: Path) -> list[Path]:
    seeds = sorted((ROOT / "sample_traces" / "chrome" / "invalid").glob("*.json"))
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_chrome_scanner import QUIRKS  # the hand-written quirks, one list for both
    except ImportError:
        QUIRKS = ['{"ph": "X", "name": "n\\u00e9", "ts": 1.5, "dur": 2, "args": {"a": [1, {"b": null}]}}']
    q = tmp / "quirks.json"
    q.write_text("[" + ",\n".join(QUIRKS) + "]")
    seeds.append(q)
    sys.path.insert(0, str(ROOT / "bench"))
    import gen_chrome

    g = tmp / "generated.json"
    gen_chrome.write(g, 60)
    text = g.read_bytes()
    array = text[text.index(b"[", text.index(b'"traceEvents"')):text.rindex(b"]") + 1]
    g.write_bytes(array)  # the event array alone: what the reader hands the scanner
    seeds.append(g)
    # more events than the scanner's guess of a chunk's rows (its bytes / 160, at least 4096): its columns
    # grow out of the outputs they were written into, and are copied back at the end
    tiny = tmp / "tiny.json"
    tiny.write_text("[" + ",".join('{"ph":"i","ts":%d,"pid":1,"tid":%d,"s":"t"}' % (i, i % 3) for i in range(6000)) + "]")
    seeds.append(tiny)
    return seeds


def run(count: int, seed: int, timeout: int) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(prefix="fuzz-scan-") as d:
        tmp = Path(d)
        built = build(tmp)
        if built is None:
            return 2, "no gcc with AddressSanitizer/UBSan here: nothing was tested"
        so, preload = built
        driver = tmp / "driver.py"
        driver.write_text(_DRIVER)
        env = dict(os.environ, LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        args = [sys.executable, str(driver), str(so.parent), str(seed), str(count)] + [str(p) for p in seed_files(tmp)]
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return 1, f"timed out after {timeout} s"
        if p.returncode != 0 or not p.stdout.startswith("ok "):
            return 1, (p.stdout + p.stderr)[-4000:]
        return 0, p.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--timeout", type=int, default=3600)
    a = ap.parse_args()
    t0 = time.perf_counter()
    rc, text = run(a.count, a.seed, a.timeout)
    print(f"{text} (seed {a.seed}, {time.perf_counter() - t0:.1f} s)")
    raise SystemExit(rc)


if __name__ == "__main__":
    main()
