"""How long ``plan`` takes on the two headline jobs, quiet and under a CPU hog (a benchmark, not a test).

    python benchmarks/plan_speed.py [--repeat 5] [--no-hog] [--no-command] [--job DeepSeek]

Each job is planned as ``asap plan`` plans it (the default headroom, ``search.planner.plan_headroom``; the
layer split on every shape that could win), less the tight row's plan (which ``asap plan`` prices in the same
pass, ``tight=True``: the command's figure below has it), ``--repeat`` times after one warm-up call (which
fills the per-process caches: event simulations of unequal interleaved chunks); then again while a busy-loop
process per CPU core competes for the machine. Medians are printed (wall, and CPU: ``time.process_time``,
every thread of the process, which barely moves with the machine's load), with ``os.getloadavg()`` before
each series so a figure can be read against how loaded the machine was. Then (unless ``--no-command``) the
whole command as a user runs it, ``--repeat`` fresh processes (start-up, imports, cold caches, the plan with
its tight row, the sensitivity, the JSON printed): median wall and CPU (the child's user + system time).
Targets on this machine, unloaded: issue 45.15, DeepSeek-V3 on 2048 H800 in 1.5 s wall; issue 32, Llama 3.1
405B in 1 s. The plan itself is the same under the hog (the split search counts moves, not seconds).

    asap plan -m deepseek-v3 -c h800 --nodes 256 -b 15360 -s 4096
    asap plan -m llama3.1-405b -c h100-sxm --nodes 2048 -b 2048 -s 8192
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from asap.search.planner import plan, plan_headroom
from asap.search.sensitivity import sensitivity
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec

JOBS = [  # (title, model, accelerator, nodes, global batch, sequence, target wall s)
    ("DeepSeek-V3 on 2048 H800", "deepseek-v3", "h800", 256, 15360, 4096, 1.5),
    ("Llama 3.1 405B on 16384 H100", "llama3.1-405b", "h100-sxm", 2048, 2048, 8192, 1.0),
]


def series(job: Job, repeat: int, sens: list[float] | None = None) -> tuple[list[float], list[float], object]:
    """(wall seconds, CPU seconds, the last result) of ``repeat`` plans; with ``sens``, also each plan's
    sensitivity (``asap plan`` computes it after the search: the top rows repriced under each input changed),
    its seconds appended to ``sens``."""
    times, cpu, r = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        r = plan(job, top=5)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if sens is not None:
            t1 = time.perf_counter()
            sensitivity(job, r.candidates)
            sens.append(time.perf_counter() - t1)
    return times, cpu, r


def command_series(model: str, acc: str, nodes: int, gb: int, seq: int, repeat: int, target_s: float) -> str:
    """Median wall and CPU seconds of ``asap plan ... --json`` as ``repeat`` fresh processes (what a user waits
    for: start-up and cold caches included), with the load before the series, against ``target_s`` (wall, on
    an unloaded machine). The processes keep a bytecode cache, as an installed asap has one (one warm-up
    process writes it, also where ``PYTHONDONTWRITEBYTECODE`` is set here)."""
    args = ["plan", "-m", model, "-c", acc, "--nodes", str(nodes), "-b", str(gb), "-s", str(seq), "--json"]
    code = "import sys; from asap.cli import main; sys.argv[0] = 'asap'; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", code, *args], capture_output=True, check=True, env=env)  # the cache
    load, walls, cpus = os.getloadavg()[0], [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, *args], capture_output=True, check=True, env=env)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    wall = statistics.median(walls)
    return (f"  as a command, asap {' '.join(args)}: {repeat} processes (load {load:.1f}) median "
            f"{wall:.2f} s wall (min {min(walls):.2f}), {statistics.median(cpus):.2f} s CPU "
            f"(min {min(cpus):.2f}); target {target_s:g} s wall unloaded: {'met' if wall <= target_s else 'not met'}"
            f" at load {load:.1f} (on a loaded machine read the CPU figure)")


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-hog", action="store_true", help="skip the series under a CPU hog")
    ap.add_argument("--no-command", action="store_true", help="skip the series of whole `asap plan` processes")
    ap.add_argument("--job", default="", help="only the jobs whose title holds this text (e.g. DeepSeek)")
    args = ap.parse_args()
    for title, model, acc, nodes, gb, seq, target_s in JOBS:
        if args.job.lower() not in title.lower():
            continue
        job = plan_headroom(Job.resolve(load_model(model), load_cluster(acc, nodes=nodes), TrainSpec(gb, seq)))
        plan(job, top=5)  # warm-up: the per-process caches
        load = os.getloadavg()[0]
        sens: list[float] = []
        quiet, quiet_cpu, r = series(job, args.repeat, sens)
        best = r.candidates[0]
        line = (f"{title}: {r.searched:,} configurations ({r.fitting:,} fit); quiet (load {load:.1f}) median "
                f"{statistics.median(quiet):.2f} s wall (min {min(quiet):.2f}, max {max(quiet):.2f}), "
                f"{statistics.median(quiet_cpu):.2f} s CPU, then the sensitivity (asap plan's top rows repriced) "
                f"median {statistics.median(sens):.3f} s")
        if not args.no_hog:
            procs = hogs(os.cpu_count() or 2)
            try:
                time.sleep(0.5)
                load = os.getloadavg()[0]
                loaded, _, r2 = series(job, args.repeat)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            same = str(r2.candidates[0].strategy) == str(best.strategy)
            line += (f"; under {os.cpu_count()} busy-loop hogs (load {load:.1f}) median "
                     f"{statistics.median(loaded):.2f} s (max {max(loaded):.2f}){'' if same else ' DIFFERENT PLAN'}")
        print(line + f"; target {target_s:g} s wall unloaded; best {best.strategy} {best.step_time_s:.3f} s/step at "
                     f"{best.peak_memory_gb:.1f} GiB (limit {r.memory_limit_gb:.1f})", flush=True)
        if not args.no_command:
            print(command_series(model, acc, nodes, gb, seq, args.repeat, target_s), flush=True)


if __name__ == "__main__":
    main()
