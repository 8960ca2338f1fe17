"""How long one small ``asap estimate`` takes as a whole process (a benchmark, not a test).

    python benchmarks/startup.py [--repeat 9] [--no-bytecode-cache]

Runs, ``--repeat`` times after one warm-up run (which writes the bytecode cache, as an installed asap has one),

    asap estimate -m llama3-8b -c dgx-h100-1node -b 32 -s 4096 -S tp2

in a fresh interpreter each time (what the ``asap`` console script runs: ``asap.cli.main``), and prints the
median wall time and the median CPU time (user + system of the child, from ``resource.getrusage``) with
``os.getloadavg()`` before the series: on a loaded machine the wall time grows with the load while the CPU time
barely moves, so read the CPU figure as the work and the wall figure against the load. Then one more run under
``-X importtime`` gives the time spent importing (the outermost imports' cumulative microseconds) and how many
modules were imported, naming the heaviest top-level imports. Target (issue 45.15): 0.35 s wall on an unloaded
machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

ARGV = ["estimate", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "32", "-s", "4096", "-S", "tp2"]
RUN_ASAP = "import sys; from asap.cli import main; sys.argv[0] = 'asap'; sys.exit(main())"
TARGET_S = 0.35


def child_env(bytecode_cache: bool) -> dict[str, str]:
    env = dict(os.environ)
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def one_run(env: dict[str, str], extra: list[str] | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one ``asap estimate`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *(extra or []), "-c", RUN_ASAP, *ARGV], env=env, capture_output=True,
                          text=True, check=False)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"error: asap {' '.join(ARGV)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s, done.stderr


def import_breakdown(env: dict[str, str], top: int = 8) -> str:
    """The outermost imports' total (s), the number of modules imported and the heaviest outermost imports."""
    _, _, stderr = one_run(env, ["-X", "importtime"])
    outer: list[tuple[int, str]] = []
    modules = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.split("|")
        modules += 1
        if not name[1:].startswith(" "):  # outermost: imported by the script itself, not by another module
            outer.append((int(cumulative), name.strip()))
    total_s = sum(c for c, _ in outer) / 1e6
    heaviest = ", ".join(f"{n} {c / 1e3:.0f} ms" for c, n in sorted(outer, reverse=True)[:top])
    return f"imports {total_s:.2f} s over {modules} modules (heaviest outermost: {heaviest})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module each run (PYTHONDONTWRITEBYTECODE=1), as a source tree without "
                         "__pycache__ does")
    args = ap.parse_args()
    env = child_env(not args.no_bytecode_cache)
    one_run(env)  # warm-up: the bytecode cache and the OS's file cache
    load = os.getloadavg()[0]
    walls, cpus = [], []
    for _ in range(args.repeat):
        wall_s, cpu_s, _ = one_run(env)
        walls.append(wall_s)
        cpus.append(cpu_s)
    print(f"asap {' '.join(ARGV)}: {args.repeat} runs (load {load:.1f}): wall median {statistics.median(walls):.3f} s "
          f"(min {min(walls):.3f}), CPU median {statistics.median(cpus):.3f} s (min {min(cpus):.3f}); "
          f"target {TARGET_S:g} s wall unloaded", flush=True)
    print(import_breakdown(env), flush=True)


if __name__ == "__main__":
    main()
