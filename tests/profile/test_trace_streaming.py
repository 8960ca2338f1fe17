"""The Kineto reader streams a trace file (ijson over traceEvents, compact rows, no event dicts kept) and gives
exactly what the whole-document reader (json.load, then timelines_from_kineto) gives, on every shared trace."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import pytest

from conftest import SHARED

from asap.errors import AsapError
from asap.profile import diagnose
from asap.profile.diagnose import diagnose_timelines
from asap.profile.kineto import stream_kineto, timelines_from_kineto
from asap.profile.load import load_timelines
from asap.profile.trace import load_document

HTA = SHARED / "traces" / "hta"
NAMES = sorted(p.name for p in HTA.glob("*.json.gz"))

# recorded from the reader before it streamed (json.loads of the whole file): step, compute, communication,
# exposed communication and idle time (s), steps, bottleneck, the top operator and its FLOPs
RECORDED = {
    "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz":
        (0.009288291015625, 0.00014904248046875, 0.0, 0.0, 0.00913924853515625, 1, "host", "aten::copy_", 1280.0),
    "nccl_parser_config_nccl_data.json.gz":
        (0.22236844661458333, 0.03943647102864583, 0.01562549739583333, 0.013063555013020832, 0.16986842057291665,
         3, "host", "ncclKernel_AllReduce_RING_LL_Sum_float", None),
    "trace_diff_control_control.json.gz":
        (0.07749083333333333, 0.05033083333333333, 0.027255833333333326, 0.014425666666666663,
         0.012734333333333335, 6, "memory", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None),
    "trace_diff_test_test.json.gz":
        (0.12406683333333335, 0.10860933333333332, 0.041890166666666666, 0.010911000000000006, 0.004546499999999999,
         6, "memory", "CompiledFunctionBackward", None),
    "trace_filter_sampled_rank-0.json.gz":
        (0.6151199999999999, 0.1058115, 0.19809949999999998, 0.16801649999999999, 0.34129199999999993, 2, "host",
         "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None),
    "trace_filter_sampled_rank-1.json.gz":
        (0.6192715, 0.1402775, 0.1895265, 0.14974749999999998, 0.3292465, 2, "host",
         "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", None),
}


def _whole_document(path):
    return timelines_from_kineto(load_document(path), str(path))


def _figures(d):
    top = d.top_ops[0] if d.top_ops else None
    return (d.step_time_s, d.compute_s, d.communication_s, d.exposed_communication_s, d.idle_s, d.n_steps,
            d.bottleneck, top.name if top else None, top.flops if top else None)


def test_every_shared_trace_is_recorded():
    assert NAMES and set(NAMES) == set(RECORDED)


@pytest.mark.parametrize("name", NAMES)
def test_streamed_diagnosis_matches_the_recorded_one(name):
    assert _figures(diagnose([HTA / name])) == RECORDED[name]


@pytest.mark.parametrize("name", NAMES)
def test_streamed_equals_whole_document(name):
    path = HTA / name
    streamed = stream_kineto(path)
    assert streamed is not None, "a Kineto trace must be read streaming"
    whole = _whole_document(path)
    a = diagnose_timelines(streamed, fusion=True).to_dict()
    b = diagnose_timelines(whole, fusion=True).to_dict()
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    for s, w in zip(streamed, whole, strict=True):
        assert (s.label, s.rank, s.world_size, s.device_name, s.device_memory_bytes, s.window_names, s.notes) == \
               (w.label, w.rank, w.world_size, w.device_name, w.device_memory_bytes, w.window_names, w.notes)
        assert s.ops == w.ops
        for part in ("compute", "comm", "p2p"):
            assert getattr(s, part).starts.tolist() == getattr(w, part).starts.tolist()


def _rank0() -> dict:
    return json.loads(gzip.decompress((HTA / "trace_filter_sampled_rank-0.json.gz").read_bytes()))


def test_keys_after_trace_events_are_read(tmp_path):
    doc = _rank0()
    doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9}]
    tail_first = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}
    path = tmp_path / "tail.json"
    path.write_text(json.dumps(tail_first))
    streamed = stream_kineto(path)
    whole = _whole_document(path)
    assert streamed is not None
    assert [(t.rank, t.world_size, t.device_name, t.device_memory_bytes) for t in streamed] == \
           [(t.rank, t.world_size, t.device_name, t.device_memory_bytes) for t in whole]
    assert streamed[0].rank == doc["distributedInfo"]["rank"] and streamed[0].device_name == "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize("packed", [False, True])
def test_truncated_file_is_one_line_error(tmp_path, packed):
    raw = json.dumps(_rank0()).encode()
    cut = raw[: len(raw) * 2 // 3]
    path = tmp_path / ("cut.json.gz" if packed else "cut.json")
    path.write_bytes(gzip.compress(raw)[: len(gzip.compress(raw)) * 2 // 3] if packed else cut)
    with pytest.raises(AsapError) as err:
        load_timelines(path)
    assert "truncated" in str(err.value) and "\n" not in str(err.value)


def test_json_only_the_standard_library_reads_is_read_whole(tmp_path):
    doc = _rank0()
    first = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    first.setdefault("args", {})["occupancy"] = float("nan")  # json writes NaN, which yajl refuses
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))
    assert stream_kineto(path) is None
    assert load_timelines(path)[0].ops == _whole_document(path)[0].ops


def test_streaming_holds_no_event_dicts(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_rank0()))
    peaks = []
    for read in (stream_kineto, _whole_document):
        tracemalloc.start()
        read(path)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[0] < peaks[1] / 3, peaks
