"""The root ``asap`` Typer application (``app``) every command module registers itself on, and its ``--version``.

Its own module so that the command modules and the package's ``__init__`` (which imports them) both import it
from here, and neither imports the other; ``asap.cli.app`` is the same object.
"""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="asap: find, explain and verify the fastest way to train an LLM on a cluster.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"asap {version('asap')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            from asap.version import __version__

            print(f"asap {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="Print asap's version and exit.")) -> None:
    """asap: find, explain and verify the fastest way to train an LLM on a cluster."""
