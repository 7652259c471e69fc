"""The 64-byte event record: struct and numpy views agree, fields land where docs/formats.md says."""

import struct

import numpy as np

from acceltrace.formats import record as R


def test_record_is_64_bytes_in_both_views():
    assert R.RECORD.size == 64
    assert R.RECORD_DTYPE.itemsize == 64


def test_encode_then_decode_gives_back_every_field():
    raw = R.encode(R.COMPLETE, 7, ts=123456789012, dur=5000, lane=R.LANE_CODES["pcie"], clock=2,
                   direction=R.DIRECTION_CODES["d2h"], mem=R.MEM_CODES["pinned"], flow_kind=R.FLOW_CODES["dma"],
                   flags=R.FLAG_FLOW_OUT | R.FLAG_HAS_BYTES, device=3, cat=9, pid=4242, tid=17,
                   corr=2**63 + 5, nbytes=1 << 33, flow=99, args=11)
    rec = R.decode(raw)[0]
    assert (rec["kind"], rec["lane"], rec["clock"], rec["direction"], rec["mem"]) == (1, 2, 2, 2, 2)
    assert (rec["flow_kind"], rec["flags"], rec["device"], rec["name"], rec["cat"]) == (3, 5, 3, 7, 9)
    assert (rec["pid"], rec["tid"], rec["ts"], rec["dur"]) == (4242, 17, 123456789012, 5000)
    assert (int(rec["corr"]), int(rec["bytes"]), rec["flow"], rec["args"]) == (2**63 + 5, 1 << 33, 99, 11)


def test_field_offsets_match_the_documented_layout():
    # docs/formats.md table; the C header asserts the same offsets with _Static_assert
    expected = {"kind": 0, "lane": 1, "clock": 2, "direction": 3, "mem": 4, "flow_kind": 5, "flags": 6,
                "device": 7, "name": 8, "cat": 12, "pid": 16, "tid": 20, "ts": 24, "dur": 32, "corr": 40,
                "bytes": 48, "flow": 56, "args": 60}
    assert R.OFFSETS == expected


def test_counter_value_travels_as_float64_bits():
    raw = R.encode_counter(3, ts=10, value=0.1 + 0.2)
    recs = R.decode(raw * 2)
    assert recs["kind"][0] == R.COUNTER
    assert R.counter_values(recs).tolist() == [0.1 + 0.2, 0.1 + 0.2]


def test_decode_refuses_a_partial_record():
    try:
        R.decode(b"\0" * 65)
    except ValueError as e:
        assert "multiple of 64" in str(e)
    else:
        raise AssertionError("a 65-byte buffer decoded")


def test_lane_codes_follow_the_store_lanes():
    from acceltrace.store import schema

    assert R.LANES == schema.LANES
    assert [k for k in R.FLOW_KINDS if k] == list(schema.FLOW_KINDS)
    assert [d for d in R.DIRECTIONS if d] == list(schema.DIRECTIONS)


def test_little_endian_on_the_wire():
    raw = R.encode(R.INSTANT, 0x01020304, ts=1)
    assert raw[8:12] == struct.pack("<I", 0x01020304)
    assert np.frombuffer(raw, R.RECORD_DTYPE)["name"][0] == 0x01020304


def test_docs_formats_table_documents_every_field_at_its_offset():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "formats.md").read_text()
    section = doc.split("## The event record")[1].split("###")[0]
    rows = re.findall(r"^\| (\d+) \| (u8|u32|i64|u64) \| (\w+) \|", section, re.M)
    assert {name: int(off) for off, _, name in rows} == R.OFFSETS


def test_docs_formats_lists_every_chunk_type():
    from pathlib import Path

    from acceltrace.formats.atrace import layout as atrace

    doc = (Path(__file__).resolve().parent.parent / "docs" / "formats.md").read_text()
    for code, name in atrace.CHUNK_NAMES.items():
        assert f"| {code} | {name} |" in doc, name


def test_c_header_struct_matches_the_python_layout(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        import pytest

        pytest.skip("no C compiler")
    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "offsets.c"
    fields = list(R.OFFSETS)
    src.write_text('#include "acceltrace.h"\nint main(void) {\n'
                   + "".join(f'    printf("{f} %zu\\n", offsetof(at_record, {f}));\n' for f in fields)
                   + "    return 0;\n}\n")
    subprocess.run([cc, "-pthread", "-I", str(root / "collect/client"), str(src), "-o", str(tmp_path / "o")],
                   check=True)
    out = subprocess.run([str(tmp_path / "o")], capture_output=True, text=True, check=True).stdout
    assert {ln.split()[0]: int(ln.split()[1]) for ln in out.splitlines()} == R.OFFSETS


def test_c_header_constants_match_the_python_ones(tmp_path):
    # the header restates the codes for C callers; a drift would write valid-looking wrong records
    import shutil
    import subprocess
    from pathlib import Path

    import pytest

    from acceltrace.formats import ring as RG

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    expected = {f"AT_{k.upper()}": v for k, v in R.KINDS.items()}
    expected.update({f"AT_LANE_{n.upper()}": i for i, n in enumerate(R.LANES)})
    expected.update({f"AT_DIR_{n.upper()}": i for n, i in R.DIRECTION_CODES.items()})
    expected.update({f"AT_MEM_{n.upper()}": i for n, i in R.MEM_CODES.items()})
    expected.update({"AT_FLAG_FLOW_OUT": R.FLAG_FLOW_OUT, "AT_FLAG_FLOW_IN": R.FLAG_FLOW_IN,
                     "AT_FLAG_HAS_BYTES": R.FLAG_HAS_BYTES, "AT_FLAG_HAS_CORR": R.FLAG_HAS_CORR,
                     "AT_NO_DEVICE": R.NO_DEVICE, "AT__RING_MAGIC": RG.RING_MAGIC, "AT__WRITE_OFF": RG.WRITE_OFF,
                     "AT__READ_OFF": RG.READ_OFF, "AT__LOST_OFF": RG.LOST_OFF, "AT__DATA_OFF": RG.DATA_OFFSET})
    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "consts.c"
    src.write_text('#include "acceltrace.h"\nint main(void) {\n'
                   + "".join(f'    printf("{n} %llu\\n", (unsigned long long)({n}));\n' for n in expected)
                   + "    return 0;\n}\n")
    subprocess.run([cc, "-pthread", "-I", str(root / "collect/client"), str(src), "-o", str(tmp_path / "c")],
                   check=True)
    out = subprocess.run([str(tmp_path / "c")], capture_output=True, text=True, check=True).stdout
    assert {ln.split()[0]: int(ln.split()[1]) for ln in out.splitlines()} == expected
