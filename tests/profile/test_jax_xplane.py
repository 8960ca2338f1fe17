"""XProf ``.xplane.pb`` profiles: ``asap diagnose`` reads them as it reads the perfetto export of the same run,
and a TPU plane's own device metadata picks the generation's roofline."""

from __future__ import annotations

import struct

import pytest

from asap.profile.diagnose import diagnose
from asap.errors import AsapError
from asap.profile.devices import infer_accelerator
from asap.profile.load import load_timelines
from asap.profile.xplane import fields, load_xspace

pytestmark = pytest.mark.jax


# --- a minimal protobuf writer, to build XSpace files by hand --------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _msg(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _str(num: int, s: str) -> bytes:
    return _msg(num, s.encode())


def _meta(field: int, mid: int, name: str) -> bytes:  # a map<int64, X*Metadata> entry
    return _msg(field, _int(1, mid) + _msg(2, _int(1, mid) + _str(2, name)))


def _event(mid: int, offset_ps: int, dur_ps: int, stats: bytes = b"") -> bytes:
    return _msg(4, _int(1, mid) + _int(2, offset_ps) + _int(3, dur_ps) + stats)


def tpu_space() -> bytes:
    """A host plane with two 10 ms steps, and a TPU v5p plane whose 'XLA Ops' line runs a 6 ms fusion and a
    3 ms all-reduce in each step."""
    us = 1_000_000  # picoseconds per microsecond
    host = (_str(2, "/host:CPU") + _meta(4, 1, "train") + _meta(5, 1, "step_num")
            + _msg(3, _str(2, "python") + _int(3, 1000)
                   + _event(1, 0, 10_000 * us, _msg(4, _int(1, 1) + _int(4, 0)))
                   + _event(1, 10_000 * us, 10_000 * us, _msg(4, _int(1, 1) + _int(4, 1)))))
    ops = b"".join(_event(2, (s * 10_000 + 1_000) * us, 6_000 * us) + _event(3, (s * 10_000 + 7_000) * us, 3_000 * us)
                   for s in range(2))
    tpu = (_str(2, "/device:TPU:0") + _meta(4, 2, "fusion.1") + _meta(4, 3, "all-reduce.2")
           + _meta(5, 7, "device_type_string") + _msg(6, _int(1, 7) + _str(5, "TPU v5p"))
           + _msg(3, _str(2, "XLA Ops") + _int(3, 1000) + ops))
    return _msg(1, host) + _msg(1, tpu)


def test_a_tpu_xspace_gives_its_steps_ops_and_generation(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(tpu_space())
    doc, stats = load_xspace(path)
    assert stats["/device:TPU:0"]["device_type_string"] == "TPU v5p"
    (tl,) = load_timelines(path)
    assert tl.device_kind == "tpu" and tl.rank == 0 and tl.window_names == ["train#0", "train#1"]
    assert infer_accelerator(tl.device_kind, tl.device_name, None) == ("tpu-v5p", None)
    comm_us = sum(op.time_us for op in tl.ops if op.is_comm)
    assert comm_us == pytest.approx(6_000) and len(tl.ops) == 4
    d = diagnose([path]).to_dict()
    assert d["step_time_s"] == pytest.approx(0.010)
    assert d["communication_s"] == pytest.approx(0.003)


def test_garbage_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.xplane.pb"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")  # a length past the end
    with pytest.raises(AsapError, match="XSpace"):
        load_xspace(path)
    assert list(fields(struct.pack("B", 8) + b"\x96\x01")) == [(1, 0, 150)]
