"""The effective payload bandwidth of one direction of a PCIe link: the one Python definition.

Lanes x line rate x line-code efficiency (8b/10b Gen1-2, 128b/130b Gen3-5, 236 of every 256
FLIT bytes Gen6) x TLP efficiency at the Max Payload Size: MPS / (MPS + per-TLP overhead),
about 24 bytes (framing, sequence number, header, LCRC; REFERENCE.md: MPS 256 reaches ~92 %)
up to Gen5, and only the 16-byte header in Gen6 FLIT mode, where framing and CRC live in the
FLIT. The server's link facts, the counter ingester's utilisation tracks, the analysis SQL
(analysis/_common.sql, with these constants as parameters) and the UI (which draws the peak the
server sends as link_peak_bytes_per_s, never its own copy) all use this formula, so "100 %" means the same everywhere.
"""

from __future__ import annotations

GT_PER_LANE = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
LINE_CODE = {1: 0.8, 2: 0.8, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 236 / 256}
TLP_OVERHEAD_BYTES = 24
FLIT_TLP_OVERHEAD_BYTES = 16


def tlp_overhead_bytes(gen: int) -> int:
    return FLIT_TLP_OVERHEAD_BYTES if int(gen) >= 6 else TLP_OVERHEAD_BYTES


def link_raw_bytes_per_s(gen: int, width: int) -> float:
    """Bytes/s one direction of the link carries after its line code, TLP framing and headers included:
    what a counter of link bytes (NVML's) reads at 100 % (KeyError for an unknown generation)."""
    gen = int(gen)
    return GT_PER_LANE[gen] * 1e9 / 8 * LINE_CODE[gen] * int(width)


def link_peak_bytes_per_s(gen: int, width: int, max_payload_bytes: int = 256) -> float:
    """Effective payload bytes/s of one direction (KeyError for an unknown generation)."""
    mps = int(max_payload_bytes)
    return link_raw_bytes_per_s(gen, width) * mps / (mps + tlp_overhead_bytes(gen))
