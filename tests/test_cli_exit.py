"""The `acceltrace` process ends as soon as its command is done (acceltrace/cli.py run): the exit code, the
output and the exit handlers' work all as with the interpreter's own exit, which it still takes when a
thread is left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"


def _acceltrace(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "acceltrace", *map(str, args)], capture_output=True, text=True,
                          timeout=240, cwd=cwd)


def test_output_exit_code_and_spill_folders(tmp_path):
    store = tmp_path / "store"
    p = _acceltrace("--store", store, "ingest", "--json", "--no-analyze", SAMPLE)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.splitlines()[-1])["slices"] > 0  # the last line written came out
    assert not list((store / "tmp").glob("duck.*.spill")), "the exit handlers removed the spill folders"
    bad = tmp_path / "garbage.json"
    bad.write_bytes(b"\x00\x01not a trace" * 100)
    p = _acceltrace("--store", store, "ingest", bad)
    assert p.returncode == 1
    assert p.stderr.startswith("acceltrace: error: ") and "garbage.json" in p.stderr
    p = _acceltrace("--store", store, "ls", "--json")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 1


def test_a_thread_left_running_is_waited_for(tmp_path):
    out = tmp_path / "written-late"
    code = f"""
import sys, threading, time
from acceltrace import cli
def main(argv=None):
    def late():
        time.sleep(0.5)
        open({str(out)!r}, "w").write("done")
    threading.Thread(target=late).start()
    print("main done", flush=True)
    return 3
cli.main = main
cli.run()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 3 and p.stdout == "main done\n"
    assert out.read_text() == "done"
