"""Every threshold the analysis passes use, with its default, in one place.

The .sql files refer to a parameter as ${name}; the runner substitutes the number
(validated here, so substitution can never inject SQL). Override per run with
run_passes(params={...}) or `acceltrace analyze ID --param NAME=VALUE`.
docs/analysis.md explains each one.
"""

from __future__ import annotations

from dataclasses import dataclass

from acceltrace.store.link import FLIT_TLP_OVERHEAD_BYTES, TLP_OVERHEAD_BYTES


@dataclass(frozen=True)
class Param:
    default: float
    unit: str
    doc: str
    minimum: float = 0.0
    maximum: float | None = None


PARAMS: dict[str, Param] = {
    # -- shared ---------------------------------------------------------------------------
    "tlp_overhead_bytes": Param(
        TLP_OVERHEAD_BYTES, "B",
        "TLP header + framing bytes per packet used for the effective link peak (PCIe: 20-26)"),
    "flit_tlp_overhead_bytes": Param(
        FLIT_TLP_OVERHEAD_BYTES, "B",
        "Gen6 FLIT mode: TLP header bytes per packet (no per-TLP framing or LCRC)"),
    "assumed_latency_ns": Param(
        0, "ns", "per-transfer fixed cost L when the trace does not let it be estimated (0 = estimate from data)"),
    "max_latency_ns": Param(
        20_000, "ns", "upper bound on the estimated per-transfer fixed cost L (DMA setup is a few us; a larger "
        "estimate means every transfer shared the link)", minimum=1),
    "reference_min_bytes": Param(
        1 << 20, "B", "copies at least this big define the best achieved (reference) bandwidth when the trace "
        "has no link configuration"),
    "warning_min_impact_ns": Param(
        1000, "ns", "a finding with at least this critical-path impact is a warning (below: info)"),
    "report_run_fraction": Param(
        0.005, "fraction", "a pass whose findings together cost less than this share of the run reports them "
        "as info (noted, not worth fixing)", maximum=1),
    "error_run_fraction": Param(
        0.05, "fraction", "a finding whose impact is at least this share of the run is an error", maximum=1),
    "max_findings_per_pass": Param(
        10000, "rows", "keep at most this many findings per pass (largest impact first); the rest are counted "
        "in analysis_status", minimum=1),
    # -- what-if replay (analysis/impact.py: read by the runner, not by a .sql file) ---------------
    "whatif_max_replays": Param(
        20, "replays", "findings replayed alone at most (largest local estimate first); the others get their "
        "pass's all-fixed saving split by local estimate (impact_basis 'pass share')"),
    "whatif_replay_nodes": Param(
        30_000_000, "nodes", "budget of replayed graph nodes for the per-finding replays (the compiled replay "
        "costs about 50 ns per node, its transformation as much again): a trace of N nodes gets at most this / N "
        "replays, the as-traced and edges-only replays counted", minimum=1),
    "whatif_max_nodes": Param(
        2_000_000, "nodes", "a graph with more nodes is replayed only as it is (its critical path) at analysis: "
        "its findings' impact_ns stay NULL and say so (acceltrace whatif replays any size)", minimum=1),
    "whatif_link_speedup": Param(
        2.0, "ratio", "pcie_saturation's fix: the window's transfers on a link this many times faster", minimum=1),
    # -- pcie_saturation ----------------------------------------------------------------------
    "saturation_fraction": Param(
        0.90, "fraction", "a link direction is saturated at or above this share of its effective peak", maximum=1),
    "saturation_min_stretch": Param(
        1.25, "ratio", "report a saturated window only when its transfers took at least this multiple of their "
        "unloaded time L + S/B in all (a lone copy at full speed is not a problem)", minimum=1),
    # -- small_transfers ----------------------------------------------------------------------
    "small_bw_fraction": Param(
        0.5, "fraction", "a transfer is small when its modelled bandwidth S/(L+S/B) is below this share of B",
        maximum=0.99),
    "small_min_burst": Param(
        4, "transfers", "report small transfers only in bursts of at least this many", minimum=1),
    "small_burst_gap_ns": Param(
        50_000, "ns", "small transfers closer than this (same device and direction) form one burst"),
    # -- pageable_memory ----------------------------------------------------------------------
    "pageable_min_bytes": Param(0, "B", "ignore pageable copies smaller than this"),
    # -- memory_access_inefficiency -----------------------------------------------------------
    "mem_amplification_threshold": Param(
        1.5, "ratio", "bytes fetched from device memory / bytes requested above which a kernel is flagged",
        minimum=1),
    "mem_low_bw_fraction": Param(
        0.25, "fraction", "a memory-bound kernel reaching under this share of the HBM peak is flagged", maximum=1),
    "mem_min_excess_ns": Param(1000, "ns", "ignore kernels whose time beyond the roofline is under this"),
    # -- copy_compute_serialization ------------------------------------------------------------
    "serial_max_gap_ns": Param(
        5_000, "ns", "a copy starting within this time after the device work before it counts as back to back"),
    "serial_min_wait_ns": Param(
        5_000, "ns", "a copy must have been ready at least this long before it started"),
    # -- launch_gaps ---------------------------------------------------------------------------
    "launch_gap_min_ns": Param(
        20_000, "ns", "device idle gaps shorter than this are not reported"),
    # -- sync_stalls ---------------------------------------------------------------------------
    "sync_min_ns": Param(10_000, "ns", "synchronising calls shorter than this are not examined"),
    "sync_gap_min_ns": Param(
        5_000, "ns", "device idle after a synchronising call returns must be at least this to report it"),
    # -- redundant_transfers --------------------------------------------------------------------
    "redundant_min_bytes": Param(0, "B", "ignore repeated copies smaller than this"),
}


class ParamError(ValueError):
    """A parameter override names an unknown parameter or has a bad value."""


def resolve(overrides: dict | None = None) -> dict[str, float]:
    """Defaults with overrides applied and checked; values are plain numbers."""
    values = {k: float(p.default) for k, p in PARAMS.items()}
    for name, raw in (overrides or {}).items():
        p = PARAMS.get(name)
        if p is None:
            known = ", ".join(sorted(PARAMS))
            raise ParamError(f"unknown parameter {name!r}; known: {known}")
        try:
            v = float(raw)
        except (TypeError, ValueError):
            raise ParamError(f"parameter {name}: expected a number, got {raw!r}") from None
        if v != v or v in (float("inf"), float("-inf")):
            raise ParamError(f"parameter {name}: expected a finite number, got {raw!r}")
        if v < p.minimum or (p.maximum is not None and v > p.maximum):
            hi = f" and <= {p.maximum:g}" if p.maximum is not None else ""
            raise ParamError(f"parameter {name}: expected >= {p.minimum:g}{hi}, got {raw!r}")
        values[name] = v
    return values


def parse_assignments(items: list[str]) -> dict[str, str]:
    """['a=1', 'b=2'] from the command line -> {'a': '1', 'b': '2'}."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ParamError(f"--param {item!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def sql_literal(value: float) -> str:
    """A number as SQL text: integers without a decimal point, others with full precision."""
    if value == int(value) and abs(value) < 2**62:
        return str(int(value))
    return repr(float(value))
