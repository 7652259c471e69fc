"""`acceltrace ingest` runs the analysis passes before it returns, unless --no-analyze."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceltrace.store.catalog import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "chrome" / "kineto" / "mi250-rocm-minitoy.json.gz"


@pytest.mark.parametrize("flag", [[], ["--no-analyze"]])
def test_ingest_waits_for_the_analysis_unless_told_not_to(tmp_path, flag):
    store = tmp_path / "store"
    p = subprocess.run([sys.executable, "-m", "acceltrace.cli", "--store", str(store), "ingest", "--json", *flag,
                        str(SAMPLE)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    trace_id = json.loads(p.stdout.splitlines()[-1])["id"]
    findings = Store(store).side_path(trace_id, "findings")
    assert findings.exists() == (not flag), "analysed" if findings.exists() else "not analysed"
