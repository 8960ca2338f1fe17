"""Sliding-window attention: the kernel's work and keys per query against hand figures."""

from dataclasses import replace

import numpy as np
import pytest

from asap.cost.estimate import model_flops_per_token
from asap.cost.layer_ops import attention_core_work, attention_flops_fwd, attention_kv_len, window_keys_ratio
from asap.spec.loader import load_model

FULL = replace(load_model("gpt-oss-120b"), sliding_window=0, sliding_window_cycle=0)


def test_window_ratio_hand_figure():
    """s = 4096, W = 128: query i sees min(128, i + 1) keys, 128 x 4096 - 128 x 127 / 2 pairs against the causal
    4096 x 4097 / 2."""
    assert window_keys_ratio(4096, 128) == pytest.approx((128 * 4096 - 128 * 127 / 2) / (4096 * 4097 / 2), rel=1e-12)
    assert window_keys_ratio(4096, 4096) == pytest.approx(1.0)
    assert window_keys_ratio(np.array([64.0, 4096.0]), 128)[0] == pytest.approx(1.0)  # s < W: causal


def test_every_layer_windowed_prices_the_ratio():
    """No cycle: every layer slides, so the mean layer's FLOPs are the ratio of a causal layer's and its keys
    per query the window's mean (W s - W (W - 1) / 2) / s."""
    s, w = 4096.0, 128
    windowed = replace(FULL, sliding_window=w)
    assert windowed.num_window_layers == windowed.num_layers
    flops, kv = attention_core_work(windowed, 1.0, s, 1.0, 1.0)
    full = attention_flops_fwd(FULL, 1.0, s, 1.0, 1.0)
    assert flops == pytest.approx(full * (w * s - w * (w - 1) / 2) / (s * (s + 1) / 2), rel=1e-12)
    assert kv == pytest.approx((w * s - w * (w - 1) / 2) / s, rel=1e-12)


def test_alternating_layers_average_flops_and_time():
    """GPT-OSS: a window on every other layer; the mean layer's FLOPs are the two kinds' mean, and a kernel time
    linear in F (kv + l0) / kv is the two layers' mean for any l0 (the harmonic keys per query)."""
    s, w, l0 = 4096.0, 128, 1000.0
    alt = replace(FULL, sliding_window=w, sliding_window_cycle=2)
    assert alt.num_window_layers == 18
    f_full, kv_full = attention_flops_fwd(FULL, 1.0, s, 1.0, 1.0), float(attention_kv_len(s, 1.0))
    f_win, kv_win = f_full * window_keys_ratio(s, w), (w * s - w * (w - 1) / 2) / s
    flops, kv = attention_core_work(alt, 1.0, s, 1.0, 1.0)
    assert flops == pytest.approx((f_full + f_win) / 2, rel=1e-12)
    time = flops * (kv + l0) / kv
    assert time == pytest.approx((f_full * (kv_full + l0) / kv_full + f_win * (kv_win + l0) / kv_win) / 2, rel=1e-12)


def test_no_window_is_unchanged():
    flops, kv = attention_core_work(FULL, 2.0, 8192.0, np.array([1.0, 4.0]), 2.0)
    np.testing.assert_array_equal(flops, attention_flops_fwd(FULL, 2.0, 8192.0, np.array([1.0, 4.0]), 2.0))
    np.testing.assert_array_equal(kv, attention_kv_len(8192.0, np.array([1.0, 4.0])))


def test_model_flops_count_the_window():
    """MFU's attention term (6 L s heads (d_qk + d_v) per token) counts a windowed layer at its ratio."""
    s, w = 4096, 128
    alt = replace(FULL, sliding_window=w, sliding_window_cycle=2)
    attn_full = model_flops_per_token(FULL, s) - model_flops_per_token(FULL, 0)
    attn_alt = model_flops_per_token(alt, s) - model_flops_per_token(alt, 0)
    assert attn_alt == pytest.approx(attn_full * (18 + 18 * window_keys_ratio(s, w)) / 36, rel=1e-9)
