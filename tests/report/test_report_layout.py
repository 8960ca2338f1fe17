"""The tune report at 1400 px in a real headless Chromium (Debian's ``chromium``, installed by the README's test
command): a probe script added to a copy of the page measures, after the figures drew, whether anything
reaches past the window's width, and reads each figure's drawn axes; a screenshot is taken at that width.
The page holds the long strings that used to run off it (every key of a 128-chunk layer split, a long
rationale, a long command) and a failed trial whose prediction (120 s) would flatten the measured 23-25 s
trials if it were drawn as a number."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from asap.report.html import FIGURE_IDS, write_report

WIDTH = 1400
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--virtual-time-budget=8000"]
SPLIT = "/".join(["1"] * 126 + ["0", "0"])
LONG = ("dp=1,tp=8,pp=16,vpp=8,cp=2,ep=1,etp=1,mbs=1,zero=1,sp=1,recompute=selective,schedule=interleaved,"
        f"dispatcher=alltoall,a2a_overlap=0,layer_split={SPLIT}")
PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var doc = document.documentElement, out = {scroll_width: doc.scrollWidth, client_width: doc.clientWidth,
                                             past_edge: [], figures: {}};
  document.querySelectorAll("body *").forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && r.right > doc.clientWidth + 1) out.past_edge.push(el.tagName + "#" + el.id);
  });
  %s.forEach(function (id) {
    var g = document.getElementById(id), full = g._fullLayout || {};
    out.figures[id] = {svgs: g.querySelectorAll("svg.main-svg").length, width: g.getBoundingClientRect().width,
                       points: g.querySelectorAll(".point").length, texts: g.textContent,
                       y_range: full.yaxis ? full.yaxis.range : null};
  });
  var pre = document.createElement("pre");
  pre.id = "asap-probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 1000); });
</script>
</body>""" % json.dumps(list(FIGURE_IDS))


def trial(i, s, status, measured, predicted, reason=""):
    return {"strategy": {}, "strategy_string": s, "status": status, "reason": reason,
            "measured_step_time_s": measured, "predicted_step_time_s": predicted,
            "catalog_step_time_s": predicted, "diagnosis": None, "trial_id": i}


def chromium() -> str:
    path = shutil.which("chromium")
    assert path, "chromium is not installed: the README's test command installs it (apt-get install -y chromium)"
    return path


def tune_page(tmp_path: Path) -> Path:
    trials = [trial(1, LONG, "ok", 25.0, 24.0), trial(2, LONG.replace("mbs=1", "mbs=2"), "ok", 23.4, 23.9),
              trial(3, LONG.replace("zero=1", "zero=0"), "failed", None, 120.0,
                    reason="out of memory: needs 91.2 GiB reserved of 80 GiB per device"),
              trial(4, LONG.replace("cp=2", "cp=4"), "ok", 24.1, 23.5)]
    proposals = [{"strategy": {}, "strategy_string": LONG, "rationale": "compute-bound (cost model): " + "the "
                  "planner's best for this job moves vpp 7->8 and mbs 1->2 " * 6, "expected_speedup": 1.04,
                  "expected_speedup_range": [0.8, 1.3], "predicted_step_time_s": 22.9, "fits": True,
                  "tradeoffs": ["peak memory 65.3 -> 71.0 GiB reserved per device"],
                  "evidence": ["diagnosis:compute_share=0.92", "planner:top"], "source": "planner",
                  "command": "asap estimate -m llama3.1-405b -c tune-cluster.yaml --devices 2048 -b 2048 "
                             "-s 8192 -S 'tp8 pp16 vpp8 cp2 rc:sel split:1x126/0/0'"}] * 3
    result = {"trials": trials, "best": {"strategy": {}, "strategy_string": LONG, "measured_step_time_s": 23.4},
              "correction": {"compute": 1.1, "scale_up": 1.0, "scale_out": 1.9, "trials": 3}}
    page = write_report(tmp_path / "tune.html", result, None, proposals, title="asap tune: llama3.1-405b")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE, 1), encoding="utf-8")
    return probed


class ProbeReader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.inside, self.text = False, ""

    def handle_starttag(self, tag, attrs):
        self.inside = self.inside or dict(attrs).get("id") == "asap-probe"

    def handle_endtag(self, tag):
        if tag == "pre":
            self.inside = False

    def handle_data(self, data):
        if self.inside:
            self.text += data


def run_chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},1200", *args,
           page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layout")
    page = tune_page(tmp)
    dom = run_chromium(page, tmp / "profile-dom", "--dump-dom").stdout
    reader = ProbeReader()
    reader.feed(dom)
    assert reader.text, dom[-2000:]
    return tmp, page, json.loads(reader.text)


def test_nothing_reaches_past_1400_px(probed):
    _, _, probe = probed
    assert probe["client_width"] == WIDTH
    assert probe["scroll_width"] <= probe["client_width"], probe["past_edge"][:20]
    assert probe["past_edge"] == []


def test_every_figure_drew_within_the_page(probed):
    _, _, probe = probed
    for fid in FIGURE_IDS:
        fig = probe["figures"][fid]
        assert fig["svgs"] >= 1 and 0 < fig["width"] <= WIDTH, (fid, fig)
    assert probe["figures"]["asap-history"]["points"] == 4  # 3 measured + the failed one on the axis
    assert probe["figures"]["asap-prediction"]["points"] >= 3


def test_a_failed_trial_is_drawn_on_the_axis_with_its_reason(probed):
    _, _, probe = probed
    history = probe["figures"]["asap-history"]
    low, high = history["y_range"]
    assert high < 30 and low > 20, history["y_range"]  # the step-time axis spans the measured 23-25 s only
    assert "out of memory" in history["texts"]


def test_screenshot_at_1400_px(probed):
    tmp, page, _ = probed
    shot = tmp / "report.png"
    run_chromium(page, tmp / "profile-shot", f"--screenshot={shot}")
    width, height = png_size(shot)
    assert (width, height) == (WIDTH, 1200)
    assert shot.stat().st_size > 20_000  # drawn, not a blank page
