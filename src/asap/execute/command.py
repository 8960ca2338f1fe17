"""The ``command`` executor: any launcher, from a template.

The template is one command line (split with ``shlex``, never given to a shell) or an argv list. Each
argument is filled with ``str.format`` placeholders:

* the strategy's keys: ``{dp} {tp} {pp} {vpp} {cp} {ep} {etp} {mbs} {recompute} {zero} {sp} {schedule}``,
  plus ``{devices}`` (= dp*tp*pp*cp), ``{edp}`` and ``{micro_batches}`` (with a global batch);
* the job: ``{model}`` (name), ``{global_batch}``, ``{seq_len}``, ``{precision}`` when given;
* the trial: ``{trial}`` (1, 2, ...), ``{trial_dir}`` (a fresh folder per trial, for logs and traces);
* any ``variables`` passed in (e.g. ``{nodes}``, ``{partition}``).

For example, Megatron-LM under Slurm::

    srun -N {nodes} --ntasks-per-node 8 python pretrain_gpt.py --tensor-model-parallel-size {tp}
        --pipeline-model-parallel-size {pp} --micro-batch-size {mbs} --global-batch-size {global_batch}
        --recompute-granularity {recompute} --profile --tensorboard-dir {trial_dir}

with ``step_time_regex=r"elapsed time per iteration \\(ms\\):\\s*([0-9.]+)"`` and ``step_time_scale=1e-3``.

The step time is the median of the regex's matches in the output (stdout and stderr together) after the
first ``warmup`` ones; traces are the files matching ``trace_glob`` (placeholders allowed) after the run. A
non-zero exit, an out-of-memory message, a timeout (a hang: the process group is killed) or an output with
no parsable step time is a failed trial with its reason.
"""

from __future__ import annotations

import glob
import math
import os
import re
import shlex
import signal
import string
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from asap.errors import AsapError
from asap.subprocs import wait_or_kill
from asap.execute.base import Executor, one_line
from asap.spec.outcome import Failure, Measurement, Result
from asap.spec.model import ModelSpec
from asap.spec.strategy import KEYS, Strategy, complete_strategy, parse_strategy, resolve_strategy
from asap.spec.train import TrainSpec
from asap.spec.words import FailureKind

DEFAULT_STEP_TIME_REGEX = r"(?i)step[ _-]?time(?:[ _-]?s)?\s*[:=]\s*([-+0-9.eE]+)"
DEFAULT_OOM_REGEX = (r"(?i)(out of memory|OutOfMemoryError|CUDA error: out of memory|RESOURCE_EXHAUSTED|"
                     r"std::bad_alloc|MemoryError|oom-kill)")
JOB_KEYS = ("devices", "edp", "micro_batches", "model", "global_batch", "seq_len", "precision", "trial", "trial_dir")


def template_fields(parts: list[str]) -> set[str]:
    out = set()
    for part in parts:
        try:
            for _, name, _, _ in string.Formatter().parse(part):
                if name is not None:
                    if name == "" or name.isdigit():
                        raise AsapError("command", f"positional placeholder {{{name}}} in {part!r}: name it, e.g. {{tp}}")
                    out.add(re.split(r"[.\[]", name, maxsplit=1)[0])
        except ValueError as e:
            raise AsapError("command", f"bad placeholder in {part!r}: {e}") from None
    return out


class CommandExecutor(Executor):
    name = "command"

    def __init__(self, template: str | list[str], *, step_time_regex: str = DEFAULT_STEP_TIME_REGEX,
                 step_time_scale: float = 1.0, warmup: int = 1, trace_glob: str | None = None,
                 timeout_s: float | None = 3600.0, cwd: str | None = None, env: dict[str, str] | None = None,
                 variables: dict[str, Any] | None = None, devices: int | None = None, model: ModelSpec | None = None,
                 train: TrainSpec | None = None, oom_regex: str = DEFAULT_OOM_REGEX, workdir: str | None = None,
                 framework: str | None = None):
        self.log_format = None
        if framework is not None:  # the stack's own step line, OOM messages and trace folder (asap.execute.logs)
            from asap.execute.logs import log_format

            self.log_format = log_format(framework)
            oom_regex = f"{oom_regex}|{self.log_format.oom}" if oom_regex else self.log_format.oom
            warmup = self.log_format.warmup
        if isinstance(template, str):
            try:
                self.argv_template = shlex.split(template)
            except ValueError as e:
                raise AsapError("command", f"cannot split the template: {e}") from None
        else:
            self.argv_template = [str(a) for a in template]
        if not self.argv_template:
            raise AsapError("command", "the template is empty")
        try:
            self.step_re = re.compile(step_time_regex)
        except re.error as e:
            raise AsapError("step_time_regex", f"not a regular expression: {e}") from None
        if self.step_re.groups < 1:
            raise AsapError("step_time_regex", "needs one capturing group around the number")
        try:
            self.oom_re = re.compile(oom_regex) if oom_regex else None
        except re.error as e:
            raise AsapError("oom_regex", f"not a regular expression: {e}") from None
        if timeout_s is not None and timeout_s <= 0:
            raise AsapError("timeout", f"must be positive, got {timeout_s}")
        self.variables = dict(variables or {})
        known = set(KEYS) | set(JOB_KEYS) | set(self.variables) | set(self.extra_fields())
        parts = self.argv_template + ([trace_glob] if trace_glob else [])
        unknown = sorted(template_fields(parts) - known)
        if unknown:
            raise AsapError("command", f"unknown placeholder {{{unknown[0]}}} (known: {', '.join(sorted(known))})")
        self.step_time_scale, self.warmup, self.trace_glob = float(step_time_scale), max(0, int(warmup)), trace_glob
        self.timeout_s, self.cwd, self.env = timeout_s, cwd, env
        self.devices, self.model, self.train = devices, model, train
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="asap-command-"))
        self.trials = 0

    def extra_fields(self) -> tuple[str, ...]:
        """Placeholders a subclass fills in ``prepare`` (e.g. ``{config}``)."""
        return ()

    def prepare(self, s: Strategy, trial_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
        """Write what the trial needs into ``trial_dir`` before it starts; the placeholders it fills."""
        return {}

    # -- strategy and placeholders ------------------------------------------------------------------------
    def parse(self, spelled: str | dict) -> Strategy:
        """Completed for the job given (model, train, devices) and checked when there is one; else only completed
        (dp = 1 without a device count)."""
        partial = parse_strategy(spelled)
        if self.model is not None and self.train is not None and self.devices is not None:
            return resolve_strategy(partial, self.model, self.train, self.devices)
        if self.devices is None and "dp" not in partial:
            partial["dp"] = 1
        return complete_strategy(partial, self.devices or 0)

    def _values(self, s: Strategy, trial_dir: Path) -> dict[str, Any]:
        v: dict[str, Any] = dict(self.variables)
        v.update(s.to_dict())
        v.update(devices=s.devices, edp=s.edp, trial=self.trials, trial_dir=str(trial_dir))
        if self.model is not None:
            v["model"] = self.model.name
        if self.train is not None:
            v.update(global_batch=self.train.global_batch, seq_len=self.train.seq_len, precision=self.train.precision,
                     micro_batches=s.micro_batches(self.train.global_batch))
        return v

    def _argv(self, values: dict[str, Any]) -> list[str]:
        return [self._fill(a, values) for a in self.argv_template]

    @staticmethod
    def _fill(part: str, values: dict[str, Any]) -> str:
        try:
            return part.format_map(values)
        except KeyError as e:
            raise AsapError("command", f"placeholder {{{e.args[0]}}} has no value for this job "
                                       "(pass model/train/variables to the executor)") from None
        except (ValueError, IndexError, AttributeError) as e:
            raise AsapError("command", f"cannot fill {part!r}: {e}") from None

    # -- running ------------------------------------------------------------------------------------------
    def _run(self, s: Strategy) -> Result:
        self.trials += 0 if self.repeat_index else 1  # a repeat is the same trial ({trial} unchanged)
        trial_dir = self.workdir / f"trial{self.trials}" / self.repeat_folder()
        trial_dir.mkdir(parents=True, exist_ok=True)
        values = self._values(s, trial_dir)
        values.update(self.prepare(s, trial_dir, values))
        argv = self._argv(values)
        log_path = trial_dir / "output.log"
        env = None if self.env is None else {**os.environ, **{k: str(v) for k, v in self.env.items()}}
        details: dict[str, Any] = {"argv": argv, "log": str(log_path), "trial_dir": str(trial_dir)}
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        cwd=self.cwd, env=env, start_new_session=True)
            except FileNotFoundError:
                return Failure(s, f"command not found: {argv[0]}", kind=FailureKind.CRASH, details=details)
            except PermissionError:
                return Failure(s, f"permission denied: {argv[0]}", kind=FailureKind.CRASH, details=details)
            except OSError as e:
                return Failure(s, one_line(f"cannot start {argv[0]}: {e}"), kind=FailureKind.CRASH, details=details)
            timed_out = wait_or_kill(proc, self.timeout_s)
        text = log_path.read_bytes().decode("utf-8", errors="replace")
        tail = "\n".join(text.splitlines()[-40:])
        rc = proc.returncode
        details["returncode"] = rc
        if timed_out:
            return Failure(s, f"timed out after {self.timeout_s:g} s (a hang?); the process group was killed",
                           kind=FailureKind.TIMEOUT, log_tail=tail, details=details)
        if rc != 0:
            return Failure(s, self._crash_reason(text, rc), kind=self._crash_kind(text, rc),
                           log_tail=tail, details=details)
        times, losses = self._parse(text, s)
        if not times:
            pattern = self.log_format.step if self.log_format else self.step_re.pattern
            return Failure(s, f"exited 0 but printed no step time matching /{pattern}/",
                           kind=FailureKind.NO_RESULT, log_tail=tail, details=details)
        stats = self._stats(times)
        step = stats.step_time_s
        details.update(step_times_s=times, log_tail=tail, as_run=self.as_run(s))
        traces = self._traces(values)
        tokens = self.train.tokens_per_step / step if self.train is not None else None
        return Measurement(s, step, tokens_per_s=tokens, losses=losses, traces=traces, details=details,
                           stats=stats, precision=self.run_precision())

    def _stats(self, times: list[float]):
        """The run's measurement: the warm-up and the profiled steps dropped (a log with no more steps than the
        warm-up keeps its last, with the minimum noise: there is nothing else to time)."""
        from asap.measure import step_stats

        profiled = self.profiled_steps(len(times))
        try:
            return step_stats(times, self.warmup, profiled)
        except ValueError:
            return step_stats(times[-1:], 0)

    def profiled_steps(self, n: int) -> list[int]:
        """The 0-based indices of the steps this executor's profiler records (never timed); a template's own
        profiler is the user's to place (``--var``), so none here."""
        return []

    def run_precision(self) -> str | None:
        return self.train.precision if self.train is not None else None

    def as_run(self, s: Strategy) -> dict[str, Any]:
        """Every knob as the trial ran it: the strategy, the precision trained in, the steps."""
        return {**s.to_dict(), "precision": self.run_precision(), "warmup_steps": self.warmup}

    def _parse(self, text: str, s: Strategy) -> tuple[list[float], list[float]]:
        """(step times s, losses): the stack's own lines with a ``framework``, else ``step_time_regex``."""
        if self.log_format is None:
            return self._step_times(text), []
        from asap.execute.logs import parse_log

        tokens = self.train.tokens_per_step if self.train is not None else None
        parsed = parse_log(self.log_format.stack, text, tokens_per_step=tokens, devices=s.devices)
        return parsed.step_times_s, parsed.losses

    def _step_times(self, text: str) -> list[float]:
        out = []
        for m in self.step_re.finditer(text):
            try:
                x = float(m.group(1)) * self.step_time_scale
            except (TypeError, ValueError):
                continue
            if math.isfinite(x) and x > 0:
                out.append(x)
        return out

    def _crash_kind(self, text: str, rc: int) -> FailureKind:
        if (self.oom_re is not None and self.oom_re.search(text)) or rc in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return FailureKind.OOM
        return FailureKind.CRASH

    def _crash_reason(self, text: str, rc: int) -> str:
        if self.oom_re is not None:
            matches = list(self.oom_re.finditer(text))
            m = matches[-1] if matches else None  # the last OOM line is the one that killed the run
            if m is not None:
                line_start = text.rfind("\n", 0, m.start()) + 1
                line_end = text.find("\n", m.end())
                line = text[line_start: line_end if line_end >= 0 else len(text)]
                return one_line(f"out of memory (exit {rc}): {line.strip()}")
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            extra = " (the kernel's OOM killer?)" if -rc == signal.SIGKILL else ""
            return f"killed by {name}{extra}"
        last = _last_error_line(text)
        return one_line(f"exited with code {rc}" + (f": {last}" if last else ""))

    def _traces(self, values: dict[str, Any]) -> list[str]:
        glob_text = self.trace_glob or (self.log_format.trace_glob if self.log_format else None)
        if not glob_text:
            return []
        if self.log_format is not None and not self.trace_glob:
            glob_text = os.path.join(values["trial_dir"], glob_text)
        pattern = self._fill(glob_text, values)
        if not os.path.isabs(pattern) and self.cwd:
            pattern = os.path.join(self.cwd, pattern)
        return sorted(str(Path(p).resolve()) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))


def _last_error_line(text: str) -> str:
    """The root cause a log says: the last exception line of a Python traceback (``ValueError: ...``), not the
    launcher's report about its failed child; else the last line saying error; else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    noise = re.compile(r"ChildFailedError|elastic|torch\.distributed\.run|exitcode|error_file|To enable traceback")
    exc = re.compile(r"^(\[[^\]]*\]:?\s*)?([\w.]+(Error|Exception|Exit)|KeyboardInterrupt)\b(:|$)")
    for line in reversed(lines):
        if exc.search(line) and not noise.search(line):
            return line
    for line in reversed(lines):  # anything saying error
        if re.search(r"(?i)(error|exception|fatal|failed|abort)", line) and not noise.search(line):
            return line
    return lines[-1] if lines else ""
