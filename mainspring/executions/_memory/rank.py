"""Ranking memory by meaning: an embedder's vectors, their cosine similarity, and a bounded
cache of the vectors facts already have.

An *embedder* is any callable taking a list of texts and returning one vector (a sequence
of numbers) per text, in order; it may be sync (run in a worker thread, so the event loop
never waits on it) or async (awaited). Texts go to it in batches of :data:`EMBED_BATCH`.
A sync embedder gets threads of its own (:class:`EmbedderThreads`, at most
:data:`MAX_EMBEDDER_THREADS` per runtime, abandoned calls included), never the shared
worker threads the persistence actor and the store's reads need: an embedder that hangs
slows searches, not commits.

What counts, and why:

- A *usable* vector is a non-empty sequence of at most :data:`MAX_DIMENSIONS` finite real
  numbers (bools are not numbers). Anything else is skipped for that fact and never cached,
  so the next search asks again.
- The embedder *failed* if it raised, or returned something that is not a sequence of
  exactly one entry per text: the caller falls back to full-text ranking.
- Vectors are kept as unit vectors (``array('d')``, 8 bytes a dimension); a usable vector
  of zero magnitude is kept empty, so it scores 0 against anything. Cosine similarity is 0
  for vectors of different lengths or of zero magnitude; only scores above 0 rank, best
  first, ties by fact id.
- The cache holds :data:`MAX_CACHED_VECTORS` vectors per runtime, least recently used out
  first, keyed by fact id and checked against the fact's text (a fact never changes, but
  a forgotten id may come back; its vector is dropped on forget anyway).

Pure math, plain Python: no numpy. Ranking many facts is CPU work, so it runs in a worker
thread too.
"""

from __future__ import annotations

import heapq
import inspect
import itertools
import math
import numbers
import operator
import threading
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import anyio.to_thread
import attrs

from ...storage import Fact, redact
from ...storage._seam import MAX_SEARCH_LIMIT, FactFilter, MemoryBackend

__all__ = [
    "EMBED_BATCH",
    "MAX_CACHED_VECTORS",
    "MAX_CANDIDATES",
    "MAX_DIMENSIONS",
    "MAX_EMBEDDER_THREADS",
    "EmbedderFailed",
    "EmbedderThreads",
    "Fallback",
    "Ranked",
    "VectorCache",
    "cosine",
    "embed",
    "rank",
    "rank_by_meaning",
    "unit_vector",
]

#: The most facts one search ranks by meaning: the newest the filter admits.
MAX_CANDIDATES = 10_000
#: Texts per embedder call.
EMBED_BATCH = 64
#: Vectors a runtime keeps (per fact id); as many as one search considers, so repeated
#: searches over the same facts do not ask the embedder again.
MAX_CACHED_VECTORS = 10_000
#: The longest vector taken as usable.
MAX_DIMENSIONS = 65_536
#: The longest reason a search reports.
MAX_DETAIL = 300
#: Worker threads a runtime's sync embedder may occupy at once, calls abandoned by a
#: cancelled search included (their thread runs on until the embedder returns).
MAX_EMBEDDER_THREADS = 4

Embedder = Callable[[list[str]], Any]
#: Why a search ranked by full text although the runtime has an embedder.
Fallback = Literal["degenerate-query", "no-usable-vectors", "embedder-error"]


class EmbedderFailed(Exception):
    """The embedder raised or answered the wrong shape (``detail`` is redacted, bounded)."""

    def __init__(self, detail: str) -> None:
        detail = bounded_detail(detail)
        super().__init__(detail)
        self.detail = detail


def bounded_detail(text: str) -> str:
    """``text`` redacted and cut to :data:`MAX_DETAIL` characters."""
    text = str(redact(text))
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def unit_vector(raw: Any) -> array[float] | None:
    """``raw`` as a unit vector; an empty array for a zero-magnitude one; None if it is not
    a usable vector (see the module docstring)."""
    if isinstance(raw, str | bytes | bytearray | Mapping) or not isinstance(raw, Iterable):
        return None
    values = array("d")
    try:
        for item in raw:
            if isinstance(item, bool) or not isinstance(item, numbers.Real):
                return None
            value = float(item)
            if not math.isfinite(value) or len(values) >= MAX_DIMENSIONS:
                return None
            values.append(value)
    except Exception:  # an odd sequence that fails to iterate: not a vector
        return None
    if not values:
        return None
    largest = max(abs(v) for v in values)
    if largest == 0.0:
        return array("d")
    # Scaled first, so that very large components cannot overflow the norm.
    scaled = [v / largest for v in values]
    norm = math.hypot(*scaled)
    return array("d", (v / norm for v in scaled))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors; 0 for different lengths, empty or zero-magnitude
    vectors (or ones that are not usable vectors at all)."""
    ua, ub = unit_vector(a), unit_vector(b)
    if ua is None or ub is None:
        return 0.0
    return _dot(ua, ub)


def _dot(a: array[float], b: array[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    total: float = sum(map(operator.mul, a, b))
    return max(-1.0, min(1.0, total))


def rank(
    query: array[float], candidates: Sequence[tuple[Fact, array[float]]], limit: int
) -> list[tuple[Fact, float]]:
    """The ``limit`` best candidates with a score above 0, by (-score, fact id). Blocking
    (CPU): called in a worker thread."""
    scored = []
    for fact, vector in candidates:
        score = _dot(query, vector)
        if score > 0.0:
            scored.append((fact, score))
    return heapq.nsmallest(limit, scored, key=lambda pair: (-pair[1], pair[0].id))


class VectorCache:
    """Usable unit vectors of facts, least recently used out first (one per runtime; used
    on the event loop only)."""

    def __init__(self, size: int = MAX_CACHED_VECTORS) -> None:
        self._size = size
        self._vectors: OrderedDict[str, tuple[str, array[float]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, fact: Fact) -> array[float] | None:
        entry = self._vectors.get(fact.id)
        if entry is None or entry[0] != fact.text:
            return None
        self._vectors.move_to_end(fact.id)
        return entry[1]

    def put(self, fact: Fact, vector: array[float]) -> None:
        self._vectors[fact.id] = (fact.text, vector)
        self._vectors.move_to_end(fact.id)
        while len(self._vectors) > self._size:
            self._vectors.popitem(last=False)

    def drop(self, fact_id: str) -> None:
        self._vectors.pop(fact_id, None)


class EmbedderThreads:
    """The worker threads of one runtime's sync embedder: a pool of its own (not anyio's
    default one, which the persistence actor's flushes and the store's reads share), at
    most ``size`` threads. Callers past that wait for a thread; when threads are held by
    calls whose search was cancelled (abandoned, still running), the caller does not wait
    for them: its search falls back (``embedder-error``)."""

    def __init__(self, size: int = MAX_EMBEDDER_THREADS) -> None:
        self._size = size
        self._callers = anyio.CapacityLimiter(size)  # searches waiting on a thread
        self._pool = anyio.CapacityLimiter(size)  # the threads themselves
        self._lock = threading.Lock()
        self._running = 0  # calls started or about to start, abandoned ones too

    @property
    def running(self) -> int:
        """Embedder calls under way (or about to start), abandoned ones included."""
        with self._lock:
            return self._running

    def _run(self, state: list[bool], embedder: Embedder, texts: list[str]) -> Any:
        with self._lock:
            if state[1]:  # the caller left before this thread started: not run
                return None
            state[0] = True
        try:
            return embedder(texts)
        finally:
            with self._lock:
                self._running -= 1

    async def call(self, embedder: Embedder, texts: list[str]) -> Any:
        """``embedder(texts)`` in one of these threads; cancellation abandons the thread
        (its answer dropped). EmbedderFailed if abandoned calls hold every thread."""
        async with self._callers:
            state = [False, False]  # [started, the caller left]
            with self._lock:
                if self._running >= self._size:
                    raise EmbedderFailed(
                        f"{self._running} earlier calls of the embedder are still running"
                    )
                self._running += 1
            try:
                return await anyio.to_thread.run_sync(
                    self._run, state, embedder, texts, abandon_on_cancel=True, limiter=self._pool
                )
            finally:
                with self._lock:
                    if not state[0]:  # never started (a started call counts itself down)
                        state[1] = True
                        self._running -= 1


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )


def _said(exc: Exception) -> str:
    """``Type: message`` of an embedder's error; the type alone if its message cannot be
    made (a broken ``__str__`` is the embedder's fault too, never the search's)."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # a broken __str__ is the embedder's fault
        return f"{type(exc).__name__} (its message could not be read)"


def _vectors(raw: Any, count: int) -> list[array[float] | None]:
    """One unit vector (or None) per text; EmbedderFailed for the wrong shape."""
    if isinstance(raw, str | bytes | bytearray | Mapping) or not isinstance(raw, Iterable):
        raise EmbedderFailed(f"the embedder returned {type(raw).__name__}, not a list of vectors")
    try:  # read one row past the count at most: an answer may be a generator that never ends
        rows = list(itertools.islice(raw, count + 1))
    except Exception as exc:  # the user's answer: EmbedderFailed
        raise EmbedderFailed(f"the embedder's answer could not be read: {_said(exc)}") from exc
    if len(rows) > count:
        raise EmbedderFailed(f"the embedder returned more vectors than the {count} texts")
    if len(rows) != count:
        raise EmbedderFailed(f"the embedder returned {len(rows)} vectors for {count} texts")
    return [unit_vector(row) for row in rows]


async def embed(
    embedder: Embedder, texts: list[str], threads: EmbedderThreads | None = None
) -> list[array[float] | None]:
    """Vectors for ``texts`` (one call per :data:`EMBED_BATCH`), each a unit vector, empty
    (zero magnitude) or None (unusable). Raises :class:`EmbedderFailed` if the embedder
    raised or answered the wrong number of vectors; cancellation passes through (a sync
    embedder's thread is abandoned, its answer dropped). A sync embedder runs in
    ``threads`` (a pool of its own for this call when None)."""
    if threads is None:
        threads = EmbedderThreads()
    out: list[array[float] | None] = []
    for start in range(0, len(texts), EMBED_BATCH):
        batch = texts[start : start + EMBED_BATCH]
        try:
            if _is_async(embedder):
                raw = await embedder(list(batch))
            else:
                raw = await threads.call(embedder, list(batch))
                if inspect.isawaitable(raw):  # a sync callable handing back a coroutine
                    raw = await raw
        except EmbedderFailed:
            raise
        except Exception as exc:  # the user's embedder: EmbedderFailed
            said = _said(exc)
            if len(said) > 4 * MAX_DETAIL:  # redacting megabytes would hold the event loop
                said = await anyio.to_thread.run_sync(bounded_detail, said)
            raise EmbedderFailed(f"the embedder raised {said}") from exc
        out.extend(await anyio.to_thread.run_sync(_vectors, raw, len(batch)))
    return out


def newest_visible(backend: MemoryBackend, where: FactFilter, cap: int) -> tuple[list[Fact], int]:
    """The newest ``cap`` facts ``where`` shows, oldest first, and how many it shows in all.
    Blocking: pages through ``memory_list`` (oldest first) in a worker thread."""
    kept: deque[Fact] = deque(maxlen=cap)
    total = 0
    after: tuple[float, str] | None = None
    while True:
        page = backend.memory_list(where, limit=MAX_SEARCH_LIMIT, after=after)
        if not page:
            break
        kept.extend(page)
        total += len(page)
        last = (page[-1].created_at, page[-1].id)
        if after is not None and last <= after:  # a backend that does not advance: stop
            break
        after = last
    return list(kept), total


@attrs.frozen(kw_only=True)
class Ranked:
    """What ranking by meaning gave: hits, or the reason to fall back (then no hits)."""

    hits: list[tuple[Fact, float]] = attrs.field(factory=list)
    fallback: Fallback | None = None
    detail: str = ""
    considered: int = 0  # candidate facts looked at (at most MAX_CANDIDATES)
    capped: bool = False  # more facts matched the filter than were looked at


async def rank_by_meaning(
    backend: MemoryBackend,
    embedder: Embedder,
    cache: VectorCache,
    query: str,
    where: FactFilter,
    limit: int,
    *,
    cap: int = MAX_CANDIDATES,
    threads: EmbedderThreads | None = None,
) -> Ranked:
    """Rank the newest ``cap`` visible facts ``where`` admits by cosine similarity to
    ``query``; see the module docstring. Never raises for the embedder's faults: a
    ``fallback`` of ``degenerate-query``, ``no-usable-vectors`` or ``embedder-error``
    says to rank by full text instead. A sync embedder runs in ``threads``."""
    if threads is None:
        threads = EmbedderThreads()
    if not query.strip():
        return Ranked(fallback="degenerate-query", detail="the query is empty")
    facts, total = await anyio.to_thread.run_sync(newest_visible, backend, where, cap)
    n, capped = len(facts), total > len(facts)
    if not facts:
        return Ranked(considered=n, capped=capped)
    try:
        (wanted,) = await embed(embedder, [query], threads)
    except EmbedderFailed as exc:
        return Ranked(fallback="embedder-error", detail=exc.detail, considered=n, capped=capped)
    if not wanted:  # None (unusable) or empty (zero magnitude)
        why = "has zero magnitude" if wanted is not None else "is not a usable vector"
        return Ranked(
            fallback="degenerate-query",
            detail=f"the query's vector {why}",
            considered=n,
            capped=capped,
        )
    vectors: dict[str, array[float]] = {}
    missing: list[Fact] = []
    for fact in facts:
        cached = cache.get(fact)
        if cached is not None:
            vectors[fact.id] = cached
        else:
            missing.append(fact)
    failed: EmbedderFailed | None = None
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        try:
            found = await embed(embedder, [fact.text for fact in batch], threads)
        except EmbedderFailed as exc:
            failed = exc  # what earlier batches gave stays cached
            break
        for fact, vector in zip(batch, found, strict=True):
            if vector is not None:  # unusable vectors are not cached: asked again next time
                cache.put(fact, vector)
                vectors[fact.id] = vector
    if failed is not None:
        return Ranked(fallback="embedder-error", detail=failed.detail, considered=n, capped=capped)
    if not vectors:
        return Ranked(
            fallback="no-usable-vectors",
            detail=f"none of the {len(facts)} facts has a usable vector",
            considered=n,
            capped=capped,
        )
    candidates = [(fact, vectors[fact.id]) for fact in facts if fact.id in vectors]
    hits = await anyio.to_thread.run_sync(rank, wanted, candidates, limit)
    return Ranked(hits=hits, considered=n, capped=capped)
