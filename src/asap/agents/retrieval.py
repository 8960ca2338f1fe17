"""Retrieval over the knowledge base: BM25 text relevance combined with applicability.

score = BM25 (scaled so the best entry has 1) + BOTTLENECK_BOOST when the entry answers the diagnosed
bottleneck + SPECIFIC_BONUS[field] for each of family / model kind / framework the entry names explicitly
(rather than ``any``) and the workload has - EXCLUDED_PENALTY for each of them whose list excludes the
workload.
Excluded entries are demoted, never removed. Ties are broken by id, so the order is deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import numpy as np
from pydantic import BaseModel, field_validator

from asap.agents.knowledge import KnowledgeEntry, load_knowledge
from asap.errors import validated
from asap.spec.words import BOTTLENECK_CLASSES, BOTTLENECKS, Bottleneck, BottleneckClass

BOTTLENECK_BOOST = 3.0
# an entry made for the workload's family or model kind is worth more than one that names its framework
SPECIFIC_BONUS = {"families": 0.4, "model_kinds": 0.4, "frameworks": 0.2}
EXCLUDED_PENALTY = 1.5
STOPWORDS = frozenset("""a an and are as at be by can do does for from has have if in into is it its more
no not of on one or so than that the their then there these this those to was when where which while with
each less what who how any""".split())
# words a bottleneck name implies, so the query meets entries that describe it in other words
B, C = Bottleneck, BottleneckClass
BOTTLENECK_WORDS: dict[str, str] = {
    B.COMPUTE: "compute bound matrix units busy flops",
    B.MEMORY: "memory hbm capacity activations out of memory",
    B.COMMUNICATION: "communication collectives exposed bandwidth link",
    B.HOST: "host launch overhead idle python input",
    B.PIPELINE_BUBBLE: "pipeline bubble idle stages warm-up",
    B.IMBALANCE: "imbalance slowest straggler wait uneven",
    # the finer classes (compute, host and pipeline_bubble are spelled as the coarse words above)
    C.TP_COMM: "tensor parallel all-reduce collectives exposed nvlink scale-up",
    C.CP_COMM: "context parallel ring attention key value exchange exposed",
    C.EP_COMM: "expert parallel all-to-all dispatch combine exposed moe",
    C.PP_COMM: "pipeline point-to-point send receive activations stages",
    C.DP_COMM: "data parallel gradient reduce-scatter all-gather zero fsdp exposed",
    C.MEMORY_CAPACITY: "memory hbm capacity activations out of memory fit",
    C.MEMORY_BANDWIDTH: "memory-bound kernels element-wise fusion bandwidth intensity",
    C.RECOMPUTE: "recompute activation recomputation full selective backward",
    C.EXPERT_IMBALANCE: "moe expert load imbalance router hot experts tokens",
    C.SEQUENCE_IMBALANCE: "packed documents attention imbalance sequence lengths",
    C.STAGE_IMBALANCE: "pipeline stage imbalance slowest layers uneven straggler",
}
# what retrieval answers: a coarse bottleneck or a finer class (compute is both; the classes' own word last)
TARGETS = BOTTLENECKS + BOTTLENECK_CLASSES[:-1]


class RetrievalQuery(BaseModel):
    """What ``retrieve`` is asked, validated: a target word and how many entries."""

    bottleneck: str
    k: int

    @field_validator("bottleneck", mode="before")
    @classmethod
    def _target(cls, v: Any) -> Any:
        if v not in TARGETS:
            raise ValueError(f"must be one of {', '.join(TARGETS)}, got {v!r}")
        return str(v)

    @field_validator("k")
    @classmethod
    def _k(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v


@dataclass(frozen=True)
class Retrieved:
    entry: KnowledgeEntry
    score: float
    why: str


def _stem(word: str) -> str:
    """A crude suffix stripper, enough for 'interleaving' ~ 'interleaved' ~ 'interleave'."""
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def tokenize(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))
    return [_stem(w) for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]


def entry_text(e: KnowledgeEntry) -> str:
    """What BM25 sees: title, body and the applicability fields as words."""
    fields = [*e.bottlenecks, *e.families, *e.model_kinds, *e.frameworks, *(k for m in e.moves for k in m)]
    return " ".join([e.title, e.title, " ".join(fields), e.body])


def _bm25s():
    """bm25s, imported without JAX: its top-k helper imports jax.lax when it can (a second of start-up for
    every ``asap propose``), and retrieval only scores (``get_scores``), never selects with it. A jax already
    imported is left as it is; one imported later imports normally."""
    import sys

    if "jax" in sys.modules or "bm25s" in sys.modules:
        import bm25s
        return bm25s
    sys.modules["jax"] = None  # `import jax.lax` raises ImportError
    try:
        import bm25s
    finally:
        del sys.modules["jax"]
    return bm25s


@lru_cache(maxsize=8)
def _index(texts: tuple[str, ...]):
    model = _bm25s().BM25()
    model.index([tokenize(t) or ["empty"] for t in texts], show_progress=False)
    return model


def _bm25(entries: list[KnowledgeEntry], query: list[str]) -> np.ndarray:
    model = _index(tuple(entry_text(e) for e in entries))
    known = [t for t in query if t in model.vocab_dict]
    scores = model.get_scores(known) if known else np.zeros(len(entries))
    top = float(np.max(scores)) if len(scores) else 0.0
    return scores / top if top > 0 else scores


def _workload_kinds(workload: dict[str, Any]) -> set[str]:
    kinds = {str(workload["model_kind"])} if workload.get("model_kind") else set()
    kinds |= {flag for flag in ("long_context", "mla") if workload.get(flag)}
    return kinds


def _applicability(e: KnowledgeEntry, workload: dict[str, Any]) -> tuple[float, list[str]]:
    """The bonus/penalty for the workload's family, model kinds and framework, with the reasons."""
    wanted: dict[str, set[Any]] = {"families": {workload.get("family")} - {None},
                                   "model_kinds": _workload_kinds(workload),
                                   "frameworks": {workload.get("framework")} - {None}}
    delta, notes = 0.0, []
    for field, have in wanted.items():
        listed = getattr(e, field)
        if not have or listed == ["any"]:
            continue
        if have & set(listed):
            delta += SPECIFIC_BONUS[field]
            notes.append(f"made for {'/'.join(sorted(have & set(listed)))}")
        else:
            delta -= EXCLUDED_PENALTY
            notes.append(f"{field} {'/'.join(listed)} exclude {'/'.join(sorted(have))}")
    return delta, notes


def _query_words(bottleneck: str, workload: dict[str, Any], query: str) -> list[str]:
    words = [bottleneck, BOTTLENECK_WORDS[bottleneck], query]
    for key, value in sorted(workload.items()):
        if isinstance(value, bool):
            words.append(key if value else "")
        elif isinstance(value, str):
            words.append(value)
    return tokenize(" ".join(words))


def applies(e: KnowledgeEntry, workload: dict[str, Any]) -> bool:
    """Whether ``e`` applies to the workload: no family, model kind or framework it names excludes it (a dense
    model never gets MoE entries, a TPU job never NVLink advice)."""
    return not any("exclude" in note for note in _applicability(e, workload)[1])


def answers(e: KnowledgeEntry, target: str) -> bool:
    """Whether ``e`` answers ``target``: a class (its ``classes``, where it names any) or a coarse bottleneck (its
    ``bottlenecks``; "compute", "host" and "pipeline_bubble" are both, and read as classes where it can)."""
    if target in BOTTLENECK_CLASSES and e.classes:
        return target in e.classes
    return target in e.bottlenecks


def retrieve(bottleneck: str, workload: dict[str, Any], query: str = "", k: int = 5,
             entries: list[KnowledgeEntry] | None = None, strict: bool = False,
             state: Mapping[str, Any] | None = None) -> list[Retrieved]:
    """The ``k`` entries that best answer ``bottleneck`` (a coarse bottleneck or a ``BottleneckClass``) on
    ``workload`` (keys: family, model_kind, long_context, mla, framework, devices, anything else), best first;
    ``query`` adds free words. ``strict``: only entries that apply (``applies``), and only those that answer it.
    ``state``: the current strategy and job (``asap.agents.precondition.variables``): only entries whose
    precondition (``when``) holds there."""
    validated(RetrievalQuery, {"bottleneck": bottleneck, "k": k})
    entries = load_knowledge() if entries is None else list(entries)
    if strict:
        entries = [e for e in entries if applies(e, workload) and answers(e, bottleneck)]
    if state is not None:
        entries = [e for e in entries if e.holds(dict(state))]
    if not entries:
        return []
    terms = _query_words(bottleneck, workload, query)
    text_scores = _bm25(entries, terms)
    ranked = []
    for e, text in zip(entries, text_scores, strict=True):
        delta, notes = _applicability(e, workload)
        hit = answers(e, bottleneck)
        score = round(float(text) + (BOTTLENECK_BOOST if hit else 0.0) + delta, 6)
        matched = sorted(set(terms) & set(tokenize(entry_text(e))))[:6]
        why = "; ".join([f"answers {bottleneck}" if hit else f"not listed for {bottleneck}", *notes,
                         f"text {float(text):.2f} ({', '.join(matched) or 'no shared words'})"])
        ranked.append(Retrieved(e, score, why))
    ranked.sort(key=lambda r: (-r.score, r.entry.id))
    return ranked[:k]


def next_moves(bottleneck: str, family: str | None, k: int = 2, model_kind: str | None = None,
               framework: str | None = None, current: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``k`` knowledge entries that best answer a diagnosed bottleneck (or class) on this accelerator family,
    model kind and framework, only those that apply, as ``{id, title, moves}`` (what ``diagnose`` prints under
    its verdict; ``propose`` checks them). With the ``current`` strategy (its keys), only the moves that apply to
    it (``knowledge.apply_move``: no ``tp /2`` at tp=1), and an entry none of whose moves applies is left out."""
    from asap.agents.knowledge import apply_move

    workload = {key: v for key, v in (("family", family), ("model_kind", model_kind), ("framework", framework)) if v}
    out = []
    for r in retrieve(bottleneck, workload, k=k + 4 if current is not None else k, strict=True):
        moves = [m for m in r.entry.moves if current is None or apply_move(current, m) is not None]
        if moves or (current is None and not r.entry.moves):
            out.append({"id": r.entry.id, "title": r.entry.title, "moves": moves})
    return out[:k]
