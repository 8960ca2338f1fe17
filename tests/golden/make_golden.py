"""Write the golden files that show behaviour unchanged across a refactor (issue 22), from the code as it is.

    PYTHONPATH=src python tests/golden/make_golden.py [--only validate,plan,train] [--check]

Three files in tests/golden/, each the figures a user sees, as the commands give them:

* ``validate.json``: ``asap validate --json`` on the packaged cases (both files) and on each of
  ``../shared/reference/calibration_runs.json`` and ``published_runs_2024_2026.json``
  (every case's predicted step time, peak memory, MFU, bottleneck, completed strategy; the MAPE).
* ``plan.json``: on every calibration case, the top rows of two plans (``plan --json``'s candidates, as
  ``benchmarks/plan_cases.py`` runs them): *published* (the case's published knobs fixed, ``--fix``; the
  ``--include-oom`` fallback when nothing fits, as ``asap validate`` completes a case) and *free* (nothing fixed),
  each with the layer-split search (the default) and without it (``--split-candidates 0``, the ``_no_ilp`` plans);
  the free plans with ``asap plan``'s default headroom (``search.planner.plan_headroom``), the published ones
  against the whole device memory as ``validate`` judges them. Each row: ``strategy`` (the dict),
  ``strategy_string``, ``step_time_s``, ``peak_memory_gb``, ``fits``. The split search is deterministic, but
  the whole search has a wall-clock limit (60 s), so the generator plans every case twice and lists the rows
  that differed in ``unstable``; the comparison (``plan_differences``) says how such rows are compared.
* ``train.json``: the reference trainer's losses over the first steps (``asap run -m tiny-dense --device cpu``,
  gloo, fp32, seed 0) under dp, pp and tp.

``--check`` compares against the stored files instead of writing them (``check``: the comparison
tests/house/test_golden.py makes). Regenerate only where a change of behaviour is meant, and say so in the commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED_CASES = REPO.parent / "shared" / "reference" / "calibration_runs.json"
SHARED_PUBLISHED = REPO.parent / "shared" / "reference" / "published_runs_2024_2026.json"
PLAN_TOP = 5
PLANNER_SPLITS = 32  # plan's default --split-candidates: rows the layer-split search may try
ROW_KEYS = ("strategy", "strategy_string", "step_time_s", "peak_memory_gb", "fits")
TRAIN_RUNS = {  # name: (strategy, global batch, seq len, steps)
    "dp2": ("dp=2", 4, 32, 3),
    "pp2": ("pp=2,mbs=1", 4, 32, 3),
    "tp2": ("tp=2,sp=1", 4, 32, 3),
}


def cli(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"asap {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def validate_golden() -> dict[str, Any]:
    return {"packaged": json.loads(cli("validate", "--json")),
            "shared": json.loads(cli("validate", "--json", "--cases", repo_relative(SHARED_CASES))),
            "shared_published": json.loads(cli("validate", "--json", "--cases", repo_relative(SHARED_PUBLISHED)))}


def repo_relative(path: Path) -> str:
    """``path`` as the commands (run in the repo) are given it: relative, so each case's ``file`` is the same
    string on any checkout (a fresh clone elsewhere, CI's own directory)."""
    return str(Path("..") / path.relative_to(REPO.parent))


def rows_of(result) -> list[dict[str, Any]]:
    out = result.to_dict()
    return [{k: d[k] for k in ROW_KEYS if k in d} for d in out["candidates"]]


PLAN_KINDS = ("published", "free", "published_no_ilp", "free_no_ilp")


def plan_case(case: dict[str, Any], index: int) -> dict[str, Any]:
    """The published and free plans of one case, as ``plan --json`` gives them (the API the CLI calls), with the
    stage-split ILP (the default) and without it (``--split-candidates 0``: no wall clock in the answer)."""
    from asap.errors import AsapError
    from asap.search.planner import plan
    from asap.search.nofit import NoFitError
    from asap.spec.hardware import cluster_from_dict
    from asap.spec.job import Job
    from asap.spec.model import model_from_dict
    from asap.spec.strategy import parse_strategy
    from asap.spec.train import TrainSpec

    cid = str(case.get("id", f"cases[{index}]"))
    m, c = model_from_dict(case["model"], where=f"{cid}.model"), cluster_from_dict(case["cluster"])
    t = TrainSpec.from_dict(case["train"])
    fixed = parse_strategy(case.get("strategy") or {}, field=f"{cid}.strategy")
    out: dict[str, Any] = {"id": cid}
    from asap.search.planner import plan_headroom

    for ilp, suffix in ((PLANNER_SPLITS, ""), (0, "_no_ilp")):
        try:
            r, oom = plan(Job.resolve(m, c, t), fixed=fixed, top=PLAN_TOP, split_candidates=ilp), False
        except NoFitError:
            r, oom = plan(Job.resolve(m, c, t), fixed=fixed, top=PLAN_TOP, include_oom=True, split_candidates=ilp), True
        out["published" + suffix] = {"oom": oom, "stopped_early": r.stopped_early, "rows": rows_of(r)}
        try:
            r = plan(plan_headroom(Job.resolve(m, c, t)), top=PLAN_TOP, split_candidates=ilp)  # as asap plan
            out["free" + suffix] = {"stopped_early": r.stopped_early, "rows": rows_of(r)}
        except AsapError as e:
            out["free" + suffix] = {"error": str(e)}
    return out


def plan_golden(passes: int = 2) -> dict[str, Any]:
    from asap.validate import load_cases

    runs = [[plan_case(case, i) for i, case in enumerate(load_cases())] for _ in range(passes)]
    unstable = []
    for first, *others in zip(*runs, strict=True):
        for other in others:
            for kind in PLAN_KINDS:
                a, b = first[kind].get("rows", []), other[kind].get("rows", [])
                for i in range(max(len(a), len(b))):
                    if i >= len(a) or i >= len(b) or not rows_equal(a[i], b[i]):
                        unstable.append({"id": first["id"], "plan": kind, "row": i,
                                         "runs": [a[i] if i < len(a) else None, b[i] if i < len(b) else None]})
    return {"top": PLAN_TOP, "cases": runs[0], "unstable": unstable}


def train_golden() -> dict[str, Any]:
    out = {}
    for name, (strategy, batch, seq, steps) in TRAIN_RUNS.items():
        res = json.loads(cli("run", "-m", "tiny-dense", "-S", strategy, "-b", str(batch), "-s", str(seq),
                             "--steps", str(steps), "--device", "cpu", "--precision", "fp32", "--seed", "0",
                             "--json"))
        out[name] = {"strategy": strategy, "global_batch": batch, "seq_len": seq, "steps": steps,
                     "strategy_string": ",".join(f"{k}={v}" for k, v in res["strategy"].items() if v is not None),
                     "losses": res["losses"]}
    return out


def close(a: float, b: float, rel: float) -> bool:
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def rows_equal(a: dict[str, Any], b: dict[str, Any], rel: float = 1e-9) -> bool:
    return (a["strategy"] == b["strategy"] and a.get("fits") == b.get("fits")
            and close(a["step_time_s"], b["step_time_s"], rel) and close(a["peak_memory_gb"], b["peak_memory_gb"], rel))


def differences(want: Any, got: Any, rel: float, where: str = "") -> list[str]:
    """Every place two JSON values differ: strings, ints and bools exactly, floats within ``rel``."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want if k not in got]
        out += [f"{where}.{k}: new" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(want[k], got[k], rel, f"{where}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(want)} items, now {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in differences(a, b, rel, f"{where}[{i}]")]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if close(want, float(got), rel) else [f"{where}: {want!r}, now {got!r}"]
    return [] if want == got and type(want) is type(got) else [f"{where}: {want!r}, now {got!r}"]


def unstable_pairs(golden: dict[str, Any]) -> set[tuple[str, str]]:
    return {(u["id"], u["plan"]) for u in golden["unstable"]}


def plan_differences(golden: dict[str, Any], got: list[dict[str, Any]], rel: float = 1e-9) -> list[str]:
    """Where today's plans differ from the golden ones: the strategy exactly, the step time and peak memory within
    ``rel``. The plans without the ILP are compared row for row. The stage-split ILP (HiGHS) stops at a wall-clock
    limit, so on a loaded machine the split it adopts, and with it the row's rank, varies (``unstable`` lists the
    rows two generating passes disagreed on): the plans with it are compared on their rows without an ILP split
    (``layer_split`` unset), in order, over the shorter list."""
    out = []
    for want, now in zip(golden["cases"], got, strict=True):
        for kind in PLAN_KINDS:
            a, b = want[kind], now[kind]
            if "error" in a or "error" in b:
                out += [] if a == b else [f"{want['id']}.{kind}: {a.get('error')!r}, now {b.get('error')!r}"]
                continue
            ra, rb = a["rows"], b["rows"]
            if not kind.endswith("_no_ilp"):
                ra = [r for r in ra if r["strategy"].get("layer_split") is None]
                rb = [r for r in rb if r["strategy"].get("layer_split") is None]
                ra, rb = ra[:min(len(ra), len(rb))], rb[:min(len(ra), len(rb))]
            elif len(ra) != len(rb):
                out.append(f"{want['id']}.{kind}: {len(ra)} rows, now {len(rb)}")
            for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
                if not rows_equal(x, y, rel):
                    out.append(f"{want['id']}.{kind}[{i}]: {x['strategy_string']} {x['step_time_s']!r} s "
                               f"{x['peak_memory_gb']!r} GB, now {y['strategy_string']} {y['step_time_s']!r} s "
                               f"{y['peak_memory_gb']!r} GB")
    return out


def check(name: str) -> list[str]:
    """Today's figures against the stored file ``name``: the differences (empty: unchanged)."""
    from asap.validate import load_cases

    want = json.loads((HERE / f"{name}.json").read_text())
    if name == "plan":
        return plan_differences(want, [plan_case(c, i) for i, c in enumerate(load_cases())])
    if name == "train":
        got = train_golden()
        return [d for k in want for d in differences(want[k]["losses"], got[k]["losses"], 1e-6, f"train.{k}.losses")]
    return differences(want, validate_golden(), 1e-9, name)


MAKERS = {"validate": validate_golden, "plan": plan_golden, "train": train_golden}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(MAKERS), help="which files: validate, plan, train (comma-separated)")
    ap.add_argument("--check", action="store_true", help="compare against the stored files, write nothing")
    args = ap.parse_args()
    failed = False
    for name in args.only.split(","):
        path = HERE / f"{name}.json"
        if args.check:
            diffs = check(name)
            print(f"{name}: {'identical' if not diffs else f'{len(diffs)} differences'}")
            for d in diffs[:40]:
                print("  " + d)
            failed |= bool(diffs)
        else:
            path.write_text(json.dumps(MAKERS[name](), indent=1, sort_keys=True) + "\n")
            print(f"wrote {path.relative_to(REPO)}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
