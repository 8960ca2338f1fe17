"""Transformer Engine's NVFP4 recipe priced physically (issue 46.3): the quantisation passes around each fp4
GEMM, the fp4 GEMM's rate against its fp8-calibrated one (the per-tile fixed cost at r = fp4 peak / bf16 peak),
Blackwell Ultra's power-capped fp4 peak, and the shared MLPerf v5.1 NVFP4 runs within 12%."""

import pytest

from asap.cost.roofline import cast_bytes_per_element, fp4_rate_share, gemm_time_s
from asap.spec.catalog import get_accelerator
from asap.validate import load_cases, validate_case
from conftest import SHARED

FP4_RUNS = SHARED / "reference" / "fp4_runs_2025.json"


def test_quantisation_traffic_per_input_element():
    # fp8 (as fitted): read bf16, write fp8
    assert cast_bytes_per_element("fp8") == 3.0
    # NVFP4: amax pass + rowwise cast + columnwise cast through the Hadamard transform, each reading bf16 (3 x 2 B),
    # two copies of 0.5 B + one E4M3 scale per 16 (2 x 0.5625 B)
    assert cast_bytes_per_element("nvfp4") == pytest.approx(7.125)
    # MXFP4: one read, both copies with an E8M0 scale per 32
    assert cast_bytes_per_element("mxfp4") == pytest.approx(2.0 + 2 * 0.53125)


def test_fp4_rate_against_fp8_on_gb200_and_gb300():
    gb200, gb300 = get_accelerator("gb200"), get_accelerator("gb300")
    # GB200: K0 = 400 (bf16 terms), r8 = 2, r4 = 4: (16384 + 800) / (16384 + 1600)
    assert fp4_rate_share(gb200, 16384.0) == pytest.approx(17184 / 17984)
    # GB300: the nominal 15 PF sustains 10 PF's worth (power share 1 / 1.5): r4 = 4 again
    assert gb300.family_constants.fp4_power_share == pytest.approx(1 / 1.5)
    assert fp4_rate_share(gb300, 16384.0) == pytest.approx(17184 / 17984 / 1.5)
    # so a large fp4 GEMM is faster on GB300 only by the board-power gain (1400 W / 1200 W)
    args = ("nvfp4", 8192.0, 16384.0, 16384.0)
    flops = 2 * 8192 * 16384 * 16384
    rate200 = flops / gemm_time_s(gb200, *args)
    rate300 = flops / gemm_time_s(gb300, *args)
    assert 1.05 < rate300 / rate200 < 1400 / 1200 + 1e-9


def test_fp4_gemm_time_hand_figure_on_gb200():
    """Llama 3.1 405B's fc1 at tp 4 (m 4096 tokens, n 26624, k 16384) on GB200: 2mnk = 3.57e12 FLOPs at
    10 PF x 0.53 (fp8 efficiency) x the shape curves x 0.9555 (the tile share), plus the NVFP4 casts of the
    4096 x 16384 input (7.125 B each at 8 TB/s x 0.86) and two launch gaps."""
    acc = get_accelerator("gb200")
    fam = acc.family_constants
    m, n, k = 4096.0, 26624.0, 16384.0
    shape = (m / (m + 64)) * (n / (n + 64)) * (k / (k + 64))
    rate = 10e15 * fam.fp8_gemm_efficiency * shape * (k + 800) / (k + 1600)
    cast = 7.125 * m * k / (8000e9 * fam.hbm_efficiency)
    hand = 2 * m * n * k / rate + cast + 2 * fam.kernel_overhead_s  # the GEMM and the cast launched
    assert gemm_time_s(acc, "nvfp4", m, n, k) == pytest.approx(hand, rel=1e-9)


@pytest.mark.skipif(not FP4_RUNS.exists(), reason="the shared fp4 runs are not next to this checkout")
@pytest.mark.parametrize("index", range(4))
def test_the_shared_nvfp4_runs_within_12_percent_and_fit(index):
    case = load_cases(FP4_RUNS)[index]
    r = validate_case(case, index)
    assert abs(r.error) <= 0.12, f"{case['id']}: {r.error:+.1%}"
    assert r.fits, f"{case['id']}: {r.peak_memory_gb:.1f} GiB"
