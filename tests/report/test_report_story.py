"""The tune report a user would share, from a real ``asap tune`` run (the quick start's job on the sim executor,
whose machine is slower than the catalog): it opens with what the loop learned in words (its corrections, the
best against the first trial, why it won), labels its points, shows each trial's tokens/s, MFU and peak memory
(a figure against the device's limit, and the table), and the best strategy as the job to launch with its time
and cost to train. Opened in headless Chromium: the learned box is drawn above every figure, and a screenshot of
the top of the page is taken (its PNG is kept beside the page for a person to look at)."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from test_report_layout import WIDTH, png_size, run_chromium

ARGS = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "--executor", "sim",
        "--sim-machine", str(REPO / "docs/examples/h100-slow-fabric.yaml"), "--budget", "3",
        "--tokens", "15T", "--price-per-device-hour", "2.5"]
PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var top = function (id) { var e = document.getElementById(id); return e ? e.getBoundingClientRect().top : null; };
  var out = {learned: top("asap-learned"), figures: {}, labels: {}};
  ["asap-history", "asap-prediction", "asap-memory", "asap-breakdown"].forEach(function (id) {
    var g = document.getElementById(id);
    out.figures[id] = top(id);
    out.labels[id] = Array.prototype.map.call(g.querySelectorAll(".textpoint, text.bartext"),
                                               function (t) { return t.textContent; });
  });
  var pre = document.createElement("pre");
  pre.id = "asap-probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 1000); });
</script>
</body>"""


class Probe(HTMLParser):
    def __init__(self):
        super().__init__()
        self.inside, self.text = False, ""

    def handle_starttag(self, tag, attrs):
        self.inside = self.inside or dict(attrs).get("id") == "asap-probe"

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "pre"

    def handle_data(self, data):
        self.text += data if self.inside else ""


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str, dict]:
    tmp = tmp_path_factory.mktemp("story")
    proc = run_cli("tune", *ARGS, "--report", tmp / "tune.html", "--json", cwd=tmp, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp, (tmp / "tune.html").read_text(encoding="utf-8"), json.loads(proc.stdout)


def learned_text(html: str) -> str:
    box = html.split('id="asap-learned"', 1)[1].split("</section>", 1)[0]
    return re.sub(r"<[^>]+>", "", box)


def test_the_page_opens_with_what_the_loop_learned(page):
    _, html, result = page
    assert html.index('id="asap-learned"') < html.index('id="asap-history"')
    text = learned_text(html)
    assert f"From {result['correction']['trials']} measured trials" in text
    assert "scale-out fabric" in text and "slower than the catalog" in text  # the slow fabric, found and said
    best = result["best"]["measured_step_time_s"]
    first = next(t for t in result["trials"] if t["status"] == "ok")["measured_step_time_s"]
    if first != best:  # the gain over the first trial, in the numbers of the JSON
        assert f"{first / best:.2f}x the first trial" in text
        assert "Why it won:" in text


def test_each_trial_shows_throughput_mfu_and_memory(page):
    _, html, result = page
    table = html.split("<h2>All trials</h2>", 1)[1]
    for header in ("tokens/s", "MFU", "peak memory"):
        assert f"<th>{header}</th>" in table
    rate = 256 * 8192 / result["best"]["measured_step_time_s"]
    assert f"{rate:,.0f}" in table  # the best's measured tokens/s, from its measured step
    assert table.count(" of 79.6 GiB") == len(result["trials"])  # each trial's peak against the H100's limit


def test_the_best_is_the_job_to_launch_with_its_cost(page):
    """The emitted job is what ``asap emit`` writes for the best strategy in the stack's format (Megatron-LM's
    arguments, or Megatron-Bridge's YAML where the arguments cannot express it)."""
    _, html, result = page
    fmt = re.search(r"The job \(([a-z-]+), as", html).group(1)
    assert fmt in ("megatron", "megatron-bridge")  # the GPU default stack
    emitted = run_cli("emit", "--format", fmt, *ARGS[:8], "-S", result["best"]["strategy_string"], "--json")
    assert emitted.returncode == 0, emitted.stderr
    assert html_escape(json.loads(emitted.stdout)["text"]) in html
    assert re.search(r"15T tokens: [\d,.]+ days, [\d,]+ device-hours \(\$[\d.]+[KMB]? at \$2\.50/device-hour\)", html)


def test_chromium_draws_the_story_above_labelled_figures(page):
    tmp, html, result = page
    probed = tmp / "probed.html"
    probed.write_text(html.replace("</body>", PROBE, 1), encoding="utf-8")
    dom = run_chromium(probed, tmp / "profile-dom", "--dump-dom").stdout
    reader = Probe()
    reader.feed(dom)
    probe = json.loads(reader.text)
    assert probe["learned"] is not None and all(probe["learned"] < top for top in probe["figures"].values())
    measured = sum(t["status"] == "ok" for t in result["trials"])
    assert sum(label.startswith("#") for label in probe["labels"]["asap-history"]) == measured
    assert len(probe["labels"]["asap-memory"]) == len(result["trials"])  # each bar carries its GiB
    shot = tmp / "report-top.png"
    run_chromium(probed, tmp / "profile-shot", f"--screenshot={shot}")
    assert png_size(shot) == (WIDTH, 1200) and shot.stat().st_size > 20_000
