"""Peak memory and time of `asap diagnose` on a ~1 GB Kineto trace, which is read streaming (and on a ~100 MB
one, to show that the peak does not follow the file's size).

Synthesizes plain (not gzipped) JSON in a temporary folder by repeating one real trace's events -- by default
../shared/traces/hta/trace_diff_control_control.json.gz, an 8-GPU NCCL training trace -- with timestamps, step
numbers (ProfilerStep#N), correlation ids and External ids shifted per copy, so that every copy adds its own
steps; diagnoses it in a child process; prints the file's size, the child's wall time and its peak RSS
(ru_maxrss, from wait4); deletes the file. ``--whole-up-to MB`` also times the whole-document reader (json.load,
then timelines_from_kineto) on files up to that size, for comparison.

    python benchmarks/trace_memory.py [--sizes 100 1000] [--source TRACE] [--whole-up-to 100]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "traces" / "hta" / "trace_diff_control_control.json.gz"
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

CHILD = """
import json, sys, time
from pathlib import Path
path, mode = Path(sys.argv[1]), sys.argv[2]
t = time.perf_counter()
if mode == "stream":
    from asap.profile import diagnose
    d = diagnose([path])
else:
    from asap.profile.diagnose import diagnose_timelines
    from asap.profile.kineto import timelines_from_kineto
    from asap.profile.trace import load_document
    d = diagnose_timelines(timelines_from_kineto(load_document(path), str(path)))
print(json.dumps({"s": time.perf_counter() - t, "steps": d.n_steps, "step_ms": d.step_time_s * 1e3,
                  "bottleneck": d.bottleneck}))
"""


def _spans(events: list[dict]) -> tuple[float, int, int, int]:
    """How far one copy shifts: the trace's time span (us), and its largest step number, correlation id and
    External id, each plus one."""
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    steps = [int(m.group(1)) for e in timed if (m := STEP_RE.match(str(e.get("name", ""))))]
    corr = [e["args"]["correlation"] for e in timed if isinstance((e.get("args") or {}).get("correlation"), int)]
    ext = [e["args"]["External id"] for e in timed if isinstance((e.get("args") or {}).get("External id"), int)]
    return t1 - t0 + 1000.0, max(steps, default=0) + 1, max(corr, default=0) + 1, max(ext, default=0) + 1


def _shifted(e: dict, k: int, spans: tuple[float, int, int, int]) -> dict:
    """Event ``e`` of copy ``k``."""
    dt, dstep, dcorr, dext = spans
    out = dict(e)
    out["ts"] = e["ts"] + k * dt
    m = STEP_RE.match(str(e.get("name", "")))
    if m:
        out["name"] = f"ProfilerStep#{int(m.group(1)) + k * dstep}"
    if isinstance(e.get("id"), int):
        out["id"] = e["id"] + k * dcorr  # flow events pair launches and kernels by correlation id
    args = e.get("args")
    if isinstance(args, dict) and ("correlation" in args or "External id" in args):
        args = dict(args)
        if isinstance(args.get("correlation"), int):
            args["correlation"] += k * dcorr
        if isinstance(args.get("External id"), int):
            args["External id"] += k * dext
        out["args"] = args
    return out


def synthesize(source: Path, path: Path, megabytes: float) -> tuple[int, int]:
    """Write a trace of about ``megabytes`` MB; return (copies of the source, events written)."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    once = [e for e in events if isinstance(e, dict) and not isinstance(e.get("ts"), (int, float))]
    spans = _spans(timed)
    head = json.dumps(doc)[:-1] + (', "traceEvents": [' if doc else '{"traceEvents": [')
    target = megabytes * 1e6
    copies, n = 0, 0
    with open(path, "w") as f:
        f.write(head + json.dumps(once)[1:-1] + (",\n" if once else ""))
        n += len(once)
        while f.tell() < target:
            f.write((",\n" if copies else "") + json.dumps([_shifted(e, copies, spans) for e in timed])[1:-1])
            copies += 1
            n += len(timed)
        f.write("]}\n")
    return copies, n


def measure(path: Path, mode: str) -> tuple[dict, float]:
    """Diagnose ``path`` in a child process: what it printed, and its peak RSS in MB."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), mode], stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()
    if child.returncode != 0:
        raise SystemExit(f"the child failed ({child.returncode}) on {path}")
    return json.loads(out), usage.ru_maxrss / 1024  # kB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[100.0, 1000.0], help="trace sizes in MB")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real Kineto trace to repeat")
    parser.add_argument("--whole-up-to", type=float, default=100.0,
                        help="also run the whole-document reader on traces up to this size (MB)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="asap-trace-memory-"))
    try:
        for mb in args.sizes:
            path = folder / f"synthetic-{mb:.0f}mb.json"
            copies, n = synthesize(args.source, path, mb)
            size = path.stat().st_size / 1e6
            modes = ["stream"] + (["whole"] if mb <= args.whole_up_to else [])
            for mode in modes:
                got, rss = measure(path, mode)
                print(f"{mode:6s} {size:7.1f} MB plain JSON ({copies} copies of {args.source.name}, {n} events): "
                      f"{got['s']:6.1f} s, peak RSS {rss:6.0f} MB; {got['steps']} steps, step "
                      f"{got['step_ms']:.2f} ms, bottleneck {got['bottleneck']}", flush=True)
            path.unlink()
    finally:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
