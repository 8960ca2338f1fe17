"""Read any trace file into timelines: the one door to the readers (``asap.profile.kineto``, ``jax_trace``,
``xplane``), which share ``asap.profile.trace``'s types and helpers; a module of its own so that the readers and
their common module do not import each other."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path

from asap.errors import AsapError
from asap.profile.trace import Timeline, load_document, trace_format


@contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while millions of event dicts are made: they hold no cycles, and the
    collector's repeated full passes over a growing heap cost a third of the parse time of a large trace."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_timelines(path: Path) -> list[Timeline]:
    """Read one trace file into its timelines (one per rank; a JAX trace of several GPUs/TPUs gives several).
    An XProf ``.xplane.pb`` is read by ``asap.profile.xplane``."""
    from asap.profile.jax_trace import timelines_from_jax
    from asap.profile.kineto import stream_kineto, timelines_from_kineto

    if path.name.endswith(".xplane.pb"):
        from asap.profile.xplane import timelines_from_xplane

        with _gc_paused():
            return timelines_from_xplane(path)

    with _gc_paused():
        streamed = stream_kineto(path)  # a Kineto trace is read streaming; others (JAX) as a whole document
        if streamed is not None:
            return streamed
        doc = load_document(path)
        try:
            fmt = trace_format(doc)
        except AsapError as e:
            raise AsapError(str(path), e.problem) from None
        return timelines_from_kineto(doc, str(path)) if fmt == "kineto" else timelines_from_jax(doc, str(path))
