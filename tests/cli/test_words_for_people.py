"""One vocabulary (issue 45.8, the words): JSON keeps ``memory`` (bandwidth-bound) and the class
``memory_capacity``; the text for people says "HBM bandwidth" and "capacity", never a bare "memory"."""

from asap.cli.compare import compare_table
from asap.spec.words import human_word


def test_people_read_hbm_bandwidth_and_capacity():
    assert human_word("memory", "memory_bandwidth") == "HBM bandwidth"
    assert human_word("memory", "memory_capacity") == "capacity"
    assert human_word("memory_capacity") == "capacity"
    assert human_word("pipeline_bubble") == "pipeline bubble" and human_word("compute") == "compute"


def test_compare_table_says_capacity_where_json_says_memory():
    from rich.console import Console

    est = {"step_time_s": 1.0, "tokens_per_s": 1.0, "mfu": 0.5, "mfu_causal": 0.4, "peak_memory_gb": 90.0,
           "fits": False, "exposed_s": {}, "breakdown_s": {}, "memory_gb": {}, "bottleneck": "memory",
           "bottleneck_class": "memory_capacity"}
    bw = {**est, "bottleneck_class": "memory_bandwidth", "fits": True}
    console = Console(width=200, record=True)
    console.print(compare_table({"estimates": [est, bw]}, ["A", "B"]))
    row = [ln for ln in console.export_text().splitlines() if "bottleneck" in ln][0]
    assert "capacity" in row and "HBM bandwidth" in row and " memory " not in row
