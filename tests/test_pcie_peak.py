"""One meaning of "100 % of the link": the model's physics, the ingesters, the server and analysis agree."""

import pytest

from acceltrace.analysis import params
from acceltrace.store.link import FLIT_TLP_OVERHEAD_BYTES, TLP_OVERHEAD_BYTES, link_peak_bytes_per_s
from acceltrace.server.metadata import link_peaks
from acceltrace.sim.pcie import LinkConfig


@pytest.mark.parametrize("gen", [3, 4, 5, 6])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("mps", [128, 256, 512])
def test_effective_peak_matches_the_device_models_payload_bandwidth(gen, width, mps):
    model = LinkConfig(gen=gen, width=width, mps=mps).payload_bytes_per_ns * 1e9
    assert link_peak_bytes_per_s(gen, width, mps) == pytest.approx(model, rel=1e-12)


def test_gen4_x16_at_mps_256_is_about_92_percent_of_the_encoded_rate():
    assert link_peak_bytes_per_s(4, 16, 256) / 31.5e9 == pytest.approx(256 / 280, rel=2e-3)


def test_server_link_facts_use_the_same_peak():
    meta = {"link_gen:0": "6", "link_width:0": "16", "max_payload_bytes:0": "128"}
    assert link_peaks(meta)["0"]["link_peak_bytes_per_s"] == link_peak_bytes_per_s(6, 16, 128)


def test_analysis_defaults_use_the_same_tlp_overheads():
    defaults = {name: p.default for name, p in params.PARAMS.items()}
    assert defaults["tlp_overhead_bytes"] == TLP_OVERHEAD_BYTES
    assert defaults["flit_tlp_overhead_bytes"] == FLIT_TLP_OVERHEAD_BYTES
