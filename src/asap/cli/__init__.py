"""The ``asap`` command line: a thin face over the importable API.

Each command lives in its own module and registers itself on ``app`` (defined in ``asap.cli.root``, re-exported
here). Every command takes ``--json`` and then prints exactly one JSON document on stdout; logs and progress go
to stderr. Bad input exits 2 with one line on stderr naming the field and the problem.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

import typer

from asap.cli.coerce import install as install_plain_coercion
from asap.cli.root import app
from asap.errors import AsapError

if TYPE_CHECKING:
    import click


def _flags_without_type() -> None:
    """Typer's help shows every option's type, ``<bool>`` for on/off flags too, which take no value: show none
    for flags (a display-only override of ``TyperOption.display_type_rich``; other types keep theirs)."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_asap_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: click.Context) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    # a monkeypatch, done through Any: mypy types neither a marker set on a function nor a method reassigned
    marked: Any = display_type_rich
    marked._asap_flags = True
    patched: Any = TyperOption
    patched.display_type_rich = display_type_rich


# which module registers each command: ``main`` imports only the one it runs (a command module pulls in its
# part of the API, and the others' imports would be start-up time spent on nothing); help, a bare ``asap`` and
# an unknown name import them all (tests/cli/test_cli_lazy_commands.py keeps this table equal to the commands)
COMMAND_MODULES: dict[str, str] = {
    "estimate": "estimate", "validate": "estimate", "presets": "estimate", "diagnose": "diagnose", "run": "run",
    "plan": "plan", "compare": "compare", "schedule": "schedule", "calibrate": "calibrate", "memory": "memory",
    "propose": "agents", "tune": "agents", "balance": "balance", "emit": "emit", "align": "align", "read": "read",
    "learn": "learn",
}
_OPTIONAL = ("diagnose", "run", "plan", "compare", "schedule", "calibrate", "memory", "agents", "balance", "emit",
             "align", "read", "learn")


def register_commands(command: str | None = None) -> None:
    """Add the commands to ``app`` (each module registers its own on import): every command, what ``main`` does
    for help and what an in-process caller (``typer.testing.CliRunner``) does before invoking ``app``; with
    ``command`` (a name in ``COMMAND_MODULES``), only the module that registers it."""
    modules = (COMMAND_MODULES[command],) if command in COMMAND_MODULES else ("estimate", *_OPTIONAL)
    for optional in modules:
        try:
            __import__(f"asap.cli.{optional}")
        except ModuleNotFoundError as e:
            if e.name != f"asap.cli.{optional}":
                raise


def command_named(argv: list[str] | None) -> str | None:
    """The command ``argv`` (``sys.argv[1:]`` when None) runs: its first word that is not an option (the root
    takes only ``--help`` and ``--version``, neither with a value); None for a bare ``asap`` or root help."""
    words = sys.argv[1:] if argv is None else argv
    return next((w for w in words if not w.startswith("-")), None)


_register_commands = register_commands  # the former name


# commands that price with numpy's small matrix products, in the main thread and in at most two pricing threads
# (``asap.search.pricing``): OpenBLAS's own threads, started with numpy, only spin beside them (on the 2-core
# machine: about 0.1 s of CPU per estimate, 11% of a DeepSeek-V3 plan's, the output byte for byte the same)
SINGLE_BLAS_COMMANDS = frozenset({"estimate", "validate", "plan", "compare", "propose", "schedule", "balance"})


def main(argv: list[str] | None = None) -> int:
    command = command_named(argv)
    if command in SINGLE_BLAS_COMMANDS and "numpy" not in sys.modules:  # a user's own setting stands
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _without_collection(lambda: register_commands(command))
    _flags_without_type()
    install_plain_coercion()  # Pydantic imported only for a value that is not a plain str, int or float
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return _exit(130)
    except SystemExit:
        raise
    except Exception as e:  # never a traceback: one line, and a non-zero exit
        print(f"error: internal error ({type(e).__name__}: {e}); rerun with ASAP_DEBUG=1 for the traceback",
              file=sys.stderr)
        if os.environ.get("ASAP_DEBUG"):
            raise
        return _exit(1)


def _without_collection(load: Callable[[], None]) -> None:
    """Run ``load`` (the command's imports) with the cycle collector off, then, the first time in a process,
    keep what start-up built out of later collections (``gc.freeze``): its modules, classes and functions live
    until the process exits, and collecting among tens of thousands of them was about a quarter of a small
    estimate's CPU (benchmarks/startup.py: 0.41 to 0.29 s, the least of 15 runs, interleaved)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        load()
    finally:
        _freeze_start_up()
        if enabled:
            gc.enable()


@functools.cache
def _freeze_start_up() -> None:
    """``gc.freeze`` once per process (an in-process caller's later ``main`` calls leave its objects alone)."""
    gc.freeze()


def _run(argv: list[str] | None) -> int:
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="asap")  # "asap" in usage and completion under python -c too
        if isinstance(rv, int) and rv:
            return _exit(rv)
    except AsapError as e:
        print(f"error: {e}", file=sys.stderr)
        return _exit(2)
    except typer.Exit as e:
        return _exit(getattr(e, "exit_code", 0))
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        return _exit(130)
    except Exception as e:
        # usage errors (missing option, bad value) from Typer's bundled Click: one line, exit 2
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            if not e.format_message():  # bare ``asap``: the help was the answer
                return _exit(0)
            print(f"error: {e.format_message()}", file=sys.stderr)
            return _exit(e.exit_code or 2)
        raise
    return _exit(0)


def _exit(code: int | None) -> int:
    """Exit the process: ``main`` is both the console script and what ``python -c`` callers run."""
    sys.exit(int(code or 0))
