"""The long contract run: Schemathesis over the whole OpenAPI, every phase, against a real server.

    .venv/bin/python bench/contract.py                    # coverage, fuzzing, stateful; 50 examples
    .venv/bin/python bench/contract.py --max-examples 200 --seed 7

It ingests a real sample trace into a fresh store, serves it on loopback, and runs `st` with
tests/contract/schemathesis.toml (a real trace id; the cross-field rejections each operation may
give). tests/test_contract.py is the short CI pass. Exit status: schemathesis's (0 = no failure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-examples", type=int, default=50)
    ap.add_argument("--phases", default="coverage,fuzzing,stateful")
    ap.add_argument("--seed", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench._server import BenchServer

    with tempfile.TemporaryDirectory(prefix="acceltrace-contract-") as tmp:
        store = Path(tmp) / "store"
        subprocess.run([sys.executable, "-m", "acceltrace", "--store", str(store), "ingest", str(SAMPLE)],
                       cwd=ROOT, check=True, capture_output=True)
        server = BenchServer(store)
        try:
            with urllib.request.urlopen(server.url + "/api/traces", timeout=30) as r:
                tid = json.load(r)["traces"][0]["id"]
            st = Path(sys.executable).parent / "st"
            cmd = [str(st), "--config-file", str(ROOT / "tests" / "contract" / "schemathesis.toml"), "run",
                   f"{server.url}/openapi.json", "--checks", "all", "--workers", "1", "--request-timeout", "30",
                   "--phases", a.phases, "--max-examples", str(a.max_examples)]
            if a.seed:
                cmd += ["--seed", a.seed]
            t0 = time.perf_counter()
            rc = subprocess.call(cmd, env=dict(os.environ, ACCELTRACE_ST_TRACE_ID=tid), cwd=ROOT)
            print(f"\ncontract run: phases {a.phases}, {a.max_examples} examples per operation,"
                  f" {time.perf_counter() - t0:.0f} s, exit {rc}")
            if "Traceback" in server.log_path.read_text(errors="replace"):
                print("the server logged a traceback:", server.log_path)
                rc = rc or 1
            return rc
        finally:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
