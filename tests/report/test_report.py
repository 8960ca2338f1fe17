"""The ``--report`` page: built from a hand-made tune result, a real estimate and proposals, then opened in a
real headless chromium (``--dump-dom`` with a virtual time budget, so nothing depends on wall-clock timing).
The page's own ``window.onerror`` handler writes script errors into ``<pre id="asap-errors">``; the dumped DOM
must show it empty and every figure drawn as plotly SVG."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.report.html import FIGURE_IDS, report_html, write_report
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job

EVIL = "<b>oom</b> & <script>alert(1)</script>"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def trial(i, s, status, measured, predicted, catalog, reason=""):
    return {"strategy": {}, "strategy_string": s, "status": status, "reason": reason,
            "measured_step_time_s": measured, "predicted_step_time_s": predicted,
            "catalog_step_time_s": catalog, "diagnosis": None, "trial_id": i}


@pytest.fixture(scope="module")
def best_estimate():
    return estimate(Job.resolve(load_model("llama3-8b"), load_cluster("h100-sxm", devices=8), TrainSpec(64, 4096)),
                    "tp=2").to_dict()


@pytest.fixture(scope="module")
def tune_result():
    trials = [trial(1, "dp=8,tp=1", "ok", 4.1, 3.9, 3.6),
              trial(2, "dp=4,tp=2", "ok", 3.6, 3.55, 3.4),
              trial(3, "dp=2,tp=4", "failed", None, 3.8, 3.5, reason=f"out of memory: {EVIL}"),
              trial(4, "dp=4,tp=2,mbs=2", "skipped", None, None, 3.3, reason="already in memory"),
              trial(5, "dp=4,tp=2,recompute=full", "ok", 3.7, 3.65, 3.5)]
    return {"trials": trials,
            "best": {"strategy": {}, "strategy_string": "dp=4,tp=2", "measured_step_time_s": 3.6},
            "correction": {"compute": 1.04, "communication": 1.12, "trials": 3}}


@pytest.fixture(scope="module")
def proposals():
    return [{"strategy": {}, "strategy_string": "dp=4,tp=2,sp=true", "rationale": f"sequence parallel {EVIL}",
             "expected_speedup": 1.08, "expected_speedup_range": [1.02, 1.15], "predicted_step_time_s": 3.3,
             "tradeoffs": ["more TP traffic per layer"], "evidence": ["Korthikanti et al. 2022 <sec. 4>"],
             "fits": True, "source": "knowledge"},
            {"strategy": {}, "strategy_string": "dp=8,tp=1,zero=1", "rationale": "shard the optimizer",
             "expected_speedup": 1.02, "expected_speedup_range": None, "predicted_step_time_s": 3.5,
             "tradeoffs": [], "evidence": [], "fits": True, "source": "neighbour"}]


@pytest.fixture(scope="module")
def report(tmp_path_factory, tune_result, best_estimate, proposals):
    path = tmp_path_factory.mktemp("report") / "sub" / "tune.html"
    out = write_report(path, tune_result, best_estimate, proposals, title="asap tune <llama3-8b>")
    assert out == path and path.is_file()
    return path


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, timeout=600)
        if shutil.which("chromium"):
            return shutil.which("chromium")
    pytest.skip("no chromium found and `apt-get install -y chromium` could not install it")


def dump_dom(page: Path, profile: Path) -> str:
    """The DOM after the page's scripts ran, from a real headless chromium."""
    cmd = [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           "--dump-dom", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "</html>" in proc.stdout, proc.stderr[-3000:]
    return proc.stdout


class FigureCounter(HTMLParser):
    """Counts, inside each figure's div, the plotly SVGs and the drawn data points and bars; collects the
    text of the error box."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []  # (tag, figure id owning the subtree)
        self.svgs = {i: 0 for i in FIGURE_IDS}
        self.points = {i: 0 for i in FIGURE_IDS}
        self.errors = ""

    def owner(self):
        return self.stack[-1][1] if self.stack else None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        own = a.get("id") if a.get("id") in FIGURE_IDS or a.get("id") == "asap-errors" else self.owner()
        cls = (a.get("class") or "").split()
        if own in FIGURE_IDS and tag == "svg" and "main-svg" in cls:
            self.svgs[own] += 1
        if own in FIGURE_IDS and "point" in cls:  # a scatter marker (path) or a bar (g)
            self.points[own] += 1
        if tag not in VOID:
            self.stack.append((tag, own))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self.owner() == "asap-errors":
            self.errors += data


def parse(dom: str) -> FigureCounter:
    counter = FigureCounter()
    counter.feed(dom)
    return counter


def test_page_is_self_contained_and_escaped(report):
    text = report.read_text(encoding="utf-8")
    assert "<script src=" not in text and "<link " not in text  # nothing loaded from elsewhere
    assert text.count("plotly.js v") >= 1 and text.count("window.PlotlyConfig") == 1  # plotly.js inlined, once
    assert text.count("Plotly.newPlot") == len(FIGURE_IDS)  # every figure
    assert text.count('id="asap-errors"') == 1
    for fid in FIGURE_IDS:
        assert f'id="{fid}"' in text
    assert EVIL not in text and "<script>alert(1)" not in text  # nowhere unescaped, neither tables nor hover
    assert "&lt;b&gt;oom&lt;/b&gt; &amp; &lt;script&gt;" in text
    assert "<title>asap tune &lt;llama3-8b&gt;</title>" in text
    # both tables: every trial and every proposal, with their reasons
    for s in ("dp=8,tp=1", "dp=2,tp=4", "dp=4,tp=2,mbs=2", "already in memory", "dp=4,tp=2,sp=true",
              "1.08x (1.02x to 1.15x)", "more TP traffic per layer", "Korthikanti et al. 2022 &lt;sec. 4&gt;",
              "shard the optimizer"):
        assert s in text, s


def test_report_renders_in_headless_chromium(report, tmp_path):
    dom = dump_dom(report, tmp_path / "profile")
    counter = parse(dom)
    assert counter.errors.strip() == "", counter.errors
    assert 'id="asap-errors" hidden' in dom  # the box stayed hidden: no script error, no rejected promise
    for fid in FIGURE_IDS:
        assert counter.svgs[fid] >= 1, (fid, counter.svgs)
    # history: 5 trial markers (3 measured, 1 failed, 1 skipped); prediction: 3 corrected + 3 catalog points
    assert counter.points["asap-history"] == 5, counter.points
    assert counter.points["asap-prediction"] == 6, counter.points
    assert counter.points["asap-breakdown"] >= 2, counter.points  # the nonzero exposed terms as bars


def test_error_box_catches_a_broken_script(tmp_path, tune_result):
    """The check above is not vacuous: a page with a failing script shows it in the error box."""
    broken = report_html(tune_result).replace("</body>", "<script>notDefinedAnywhere();</script></body>")
    page = tmp_path / "broken.html"
    page.write_text(broken, encoding="utf-8")
    counter = parse(dump_dom(page, tmp_path / "profile"))
    assert "notDefinedAnywhere" in counter.errors, counter.errors
    assert counter.svgs["asap-history"] >= 1  # the figures before the broken script still drew


def test_report_without_estimate_or_proposals(tmp_path):
    result = {"trials": [trial(None, "dp=8", "failed", None, None, None, reason="launch failed")],
              "best": None, "correction": {}}
    path = write_report(tmp_path / "empty.html", result)
    text = path.read_text(encoding="utf-8")
    assert "No proposals were given." in text and "launch failed" in text
    assert "no estimate of the best strategy was given" in text
    counter = parse(dump_dom(path, tmp_path / "profile"))
    assert counter.errors.strip() == "", counter.errors
    assert all(counter.svgs[f] >= 1 for f in FIGURE_IDS), counter.svgs
