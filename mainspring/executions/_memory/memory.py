"""Agent memory as users and agents see it: ``Runtime.memory`` and ``ctx.memory``.

A fact is a short text in a scope (``user``, ``project``, ``repository``, and
``organization`` on a runtime opened with one), with a domain, a confidence and an optional
end of validity. Facts outlive runs; the storage rules (supersession through conflict
groups, forgetting, what a search shows) are ``mainspring.storage``'s (see ``Fact``).

This module checks and shapes what callers give before anything is stored: the scope is
resolved (a ``Scope`` passes; a name is trimmed and lowercased; ``organization`` without a
configured organization is :class:`ScopeNotConfigured`, decided before the fallback; any
other name means ``project``), the confidence clamped to 0..1, the text redacted (E5) and
then bounded, ids checked (X1) before any query. Writes go through the persistence actor
(the only writer); reads run in a worker thread and never write (E7).

Search ranks by the store's full-text rank, or, on a runtime with an embedder, by cosine
similarity (``_memory_rank``), falling back to full text when that cannot rank; the
answer says which ranking it used and why it fell back.
"""

from __future__ import annotations

import builtins
import datetime as dt
import decimal
import logging
import math
import numbers
import operator
import sys
import time
from collections.abc import Iterable
from typing import final

import anyio.to_thread
import attrs

from ...actors import MainspringError
from ...storage import Fact, Scope, redact
from ...storage._seam import (
    MAX_FACT_TEXT,
    MAX_SEARCH_LIMIT,
    Committer,
    FactFilter,
    ForgetFact,
    MemoryBackend,
    RememberFact,
    check_id,
    new_fact_id,
    query_terms,
    sha256_hex,
)
from .rank import MAX_CANDIDATES, Embedder, EmbedderThreads, Fallback, VectorCache, rank_by_meaning

__all__ = [
    "AgentMemory",
    "Memory",
    "MemoryHit",
    "MemorySearch",
    "ScopeNotConfigured",
    "check_embedder",
    "check_organization",
]

#: The longest domain or conflict group name.
MAX_NAME = 128
#: The longest text taken for redaction (masks shorten secrets, never by this much).
MAX_RAW_TEXT = 16 * MAX_FACT_TEXT


#: Memory's logger: a search that could not rank by meaning (O1: silent unless configured).
logger = logging.getLogger("mainspring.memory")


def _logged_fallback(fallback: str, detail: str, considered: int) -> None:
    """A search ranked by full text instead of by meaning: the embedder's failure at
    WARNING, the other reasons (an empty query, no usable vectors) at DEBUG. ``detail`` is
    redacted and bounded already (``rank.bounded_detail``); what a terminal would act on is
    shown as escapes."""
    level = logging.WARNING if fallback == "embedder-error" else logging.DEBUG
    if logger.isEnabledFor(level):
        shown = detail if detail.isprintable() else ascii(detail)[1:-1]
        logger.log(
            level,
            "memory search ranked by full text (%s): %s",
            fallback,
            shown,
            extra={"fallback": fallback, "considered": considered},
        )


class ScopeNotConfigured(MainspringError, ValueError):
    """The ``organization`` scope was asked for on a runtime opened without an
    ``organization``: the caller's fault (nothing was stored or searched)."""

    def __init__(self, scope: str = "organization") -> None:
        super().__init__(
            f"the {scope} scope needs a runtime opened with organization=...; none is set"
        )
        self.scope = scope


@attrs.frozen(kw_only=True)
class MemoryHit:
    """One search result: the fact and its score (higher is better; cosine similarity in
    0..1 when ranked by meaning, else the store's full-text score)."""

    fact: Fact
    score: float


@attrs.frozen(kw_only=True)
class MemorySearch:
    """What a search found and how it ranked.

    ``ranking`` is ``"cosine"`` when ranked by an embedder's vectors, else the store's
    full-text ranking (``"bm25"`` on SQLite and files, ``"ts_rank"`` on PostgreSQL).
    ``fallback`` says why a runtime with an embedder ranked by full text:
    ``"degenerate-query"`` (an empty query, or its vector is unusable or of zero
    magnitude), ``"no-usable-vectors"`` (no candidate fact got one) or ``"embedder-error"``
    (it raised or answered the wrong number of vectors); None otherwise. ``detail`` is the
    reason in words (redacted, bounded; empty when there is none). ``considered`` is how many
    facts were ranked by meaning (at most the newest 10,000 the filter admits), ``capped``
    whether more were admitted than that.
    """

    hits: tuple[MemoryHit, ...]
    ranking: str
    fallback: Fallback | None = None
    detail: str = ""
    considered: int = 0
    capped: bool = False


# -- checks ------------------------------------------------------------------------------------


def check_organization(organization: object) -> str | None:
    """``organization`` if None or a valid id (X1); InvalidId otherwise."""
    return None if organization is None else check_id(organization)


def check_embedder(embedder: object) -> Embedder | None:
    """``embedder`` if None or callable; TypeError otherwise."""
    if embedder is not None and not callable(embedder):
        raise TypeError(f"embedder must be callable, not {type(embedder).__name__}")
    return embedder


def resolve_scope(scope: object, organization: str | None) -> Scope:
    """The scope a caller named (see the module docstring)."""
    if isinstance(scope, Scope):
        resolved = scope
    elif isinstance(scope, str):
        name = scope.strip().lower()
        # The organization is decided before the fallback: asking for it without one is an
        # error, never a quiet write into the project.
        if name == Scope.ORGANIZATION.value:
            resolved = Scope.ORGANIZATION
        else:
            resolved = Scope(name) if name in Scope._value2member_map_ else Scope.PROJECT
    else:
        raise TypeError(f"a scope is a name (str) or a Scope, not {type(scope).__name__}")
    if resolved is Scope.ORGANIZATION and organization is None:
        raise ScopeNotConfigured()
    return resolved


def resolve_scopes(scopes: object, organization: str | None) -> frozenset[Scope] | None:
    """None, or the scopes named (one name or an iterable of them)."""
    if scopes is None:
        return None
    if isinstance(scopes, str | Scope):
        scopes = (scopes,)
    if isinstance(scopes, bytes | bytearray | memoryview) or not isinstance(scopes, Iterable):
        raise TypeError(f"scopes is a scope or a list of them, not {type(scopes).__name__}")
    resolved = frozenset(resolve_scope(scope, organization) for scope in scopes)
    if not resolved:
        raise ValueError("scopes must name at least one scope (None means every scope)")
    return resolved


def real(value: object, what: str) -> float:
    """``value`` (a real number or a ``Decimal``) as a float; one too large for a float (an
    int, a fraction, a decimal) is still finite: the largest float of its sign. TypeError
    for a bool or a non-number, ValueError for NaN or an infinity."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if isinstance(value, decimal.Decimal) and not value.is_finite():
        raise ValueError(f"{what} must be finite, not {value}")
    try:
        number = float(value)
    except OverflowError:  # an int or a fraction beyond a float's range
        return sys.float_info.max if operator.gt(value, 0) else -sys.float_info.max
    if not math.isfinite(number):
        if isinstance(value, decimal.Decimal):  # a finite decimal beyond a float's range
            return math.copysign(sys.float_info.max, number)
        raise ValueError(f"{what} must be finite, not {number!r}")
    return number


def clamp_confidence(value: object, what: str = "confidence") -> float:
    """``value`` (see :func:`real`) as a float clamped to 0..1."""
    return min(1.0, max(0.0, real(value, what)))


def check_valid_until(value: object) -> float | None:
    """Epoch seconds from a number or an aware datetime (None: valid until forgotten)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("valid_until must be an aware datetime (with a time zone)")
        value = value.timestamp()
    if isinstance(value, bool) or not isinstance(value, numbers.Real | decimal.Decimal):
        raise TypeError(
            f"valid_until must be epoch seconds or a datetime, not {type(value).__name__}"
        )
    try:
        seconds = real(value, "valid_until")
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"valid_until must be a finite time after the epoch, not {seconds!r}")
    return seconds


def check_name(value: object, what: str, *, optional: bool = False) -> str | None:
    """A domain or conflict group: an id (X1) of at most :data:`MAX_NAME` characters."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if len(value) > MAX_NAME:
        raise ValueError(f"{what} must be at most {MAX_NAME} characters")
    return check_id(value)


def check_stored_name(value: object, what: str, *, optional: bool = False) -> str | None:
    """:func:`check_name` for a name that is stored with a fact: one the redactor would
    mask (a key or token shaped like an id) is refused, never stored in the clear (E5)."""
    name = check_name(value, what, optional=optional)
    if name is not None and str(redact(name)) != name:
        raise ValueError(f"{what} looks like a secret: it is not stored (E5)")
    return name


def check_text(text: object, what: str = "text") -> str:
    """``text`` redacted (E5), then bounded: 1..MAX_FACT_TEXT characters, no NUL. The error
    never quotes the text. Text far past the bound (:data:`MAX_RAW_TEXT`) is refused before
    it is scanned: redacting megabytes would hold the event loop."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    if len(text) > MAX_RAW_TEXT:
        raise ValueError(f"{what} must be at most {MAX_FACT_TEXT} characters, not {len(text)}")
    if "\0" in text:
        raise ValueError(f"{what} must not contain NUL")
    masked = str(redact(str(text)))
    if not masked.strip():
        raise ValueError(f"{what} must not be empty")
    if len(masked) > MAX_FACT_TEXT:
        raise ValueError(f"{what} must be at most {MAX_FACT_TEXT} characters, not {len(masked)}")
    return masked


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be within 1..{MAX_SEARCH_LIMIT}, not {limit}")
    return limit


def check_after(after: object) -> tuple[float, str] | None:
    """Where a listing goes on: None, the last fact of the previous page, or its
    ``(created_at, id)``."""
    if after is None:
        return None
    if isinstance(after, Fact):
        return (after.created_at, after.id)
    if isinstance(after, tuple) and len(after) == 2:
        at, fact_id = after
        try:
            seconds = real(at, "after")
        except (TypeError, ValueError):
            seconds = math.nan
        if math.isfinite(seconds):
            return (seconds, check_id(fact_id))
    raise TypeError("after is a Fact or its (created_at, id), or None")


# -- the API -----------------------------------------------------------------------------------


class Memory:
    """Facts that outlive runs: remember, search, forget, get, list.

    Held by the runtime (``runtime.memory``) and by agents (``ctx.memory``, an
    :class:`AgentMemory`); not constructed by users. Every method is a checkpoint. A write
    returns once durable (through the persistence actor); if the caller is cancelled
    meanwhile, the write may still land. Reads run in a worker thread and never write.
    ``TypeError`` on every call if the store keeps no memory.
    """

    def __init__(
        self,
        committer: Committer,
        *,
        organization: str | None = None,
        embedder: Embedder | None = None,
        cache: VectorCache | None = None,
        threads: EmbedderThreads | None = None,
    ) -> None:
        self._committer = committer
        self._organization = organization
        self._embedder = embedder
        self._cache = cache if cache is not None else VectorCache()
        # A sync embedder's own threads, shared by the runtime's agents (never the worker
        # threads the persistence actor needs).
        self._threads = threads if threads is not None else EmbedderThreads()

    @property
    def organization(self) -> str | None:
        """The organization ``organization``-scoped facts belong to (None: no such scope)."""
        return self._organization

    def _backend(self) -> MemoryBackend:
        backend = self._committer.memory_backend()
        if backend is None:
            store = type(self._committer.store).__name__
            raise TypeError(f"{store} keeps no memory: use a store that does")
        return backend

    def _fact(
        self,
        text: object,
        scope: object,
        domain: object,
        confidence: object,
        valid_until: object,
        conflict_group: object,
    ) -> Fact:
        resolved = resolve_scope(scope, self._organization)
        return Fact(
            id=new_fact_id(),
            text=check_text(text),
            scope=resolved,
            domain=str(check_stored_name(domain, "domain")),
            confidence=clamp_confidence(confidence),
            valid_until=check_valid_until(valid_until),
            conflict_group=check_stored_name(conflict_group, "conflict_group", optional=True),
            organization=self._organization if resolved is Scope.ORGANIZATION else None,
            created_at=time.time(),
        )

    async def _store(self, fact: Fact) -> Fact:
        # The runtime's organization travels with the write: whose organization facts the
        # new one may supersede (never another organization's).
        write = RememberFact(fact, organization=self._organization)
        (answer,) = await self._committer.memory([write])
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, Fact)
        return answer

    async def remember(
        self,
        text: str,
        *,
        scope: Scope | str = "project",
        domain: str = "general",
        confidence: float = 1.0,
        valid_until: float | dt.datetime | None = None,
        conflict_group: str | None = None,
    ) -> Fact:
        """Store a fact and return it as stored (its text redacted).

        ``scope``: see the module docstring (``ScopeNotConfigured`` for ``organization``
        without one; unknown names mean ``project``). ``confidence`` is clamped to 0..1.
        ``valid_until`` is epoch seconds or an aware datetime; the fact stops showing then.
        A ``conflict_group`` makes this fact supersede every current fact of that group, in
        every scope (organization facts only of this runtime's organization).
        ``TypeError``/``ValueError`` for bad input (empty or, once redacted, longer than
        4,096 characters; a domain or group that is not an id), before anything is stored.
        """
        self._backend()
        fact = self._fact(text, scope, domain, confidence, valid_until, conflict_group)
        return await self._store(fact)

    async def forget(self, fact_id: str) -> bool:
        """Delete a fact; whether it existed. What it superseded passes to its own superseder
        (or becomes current again). Another organization's fact is left alone (False).
        ``InvalidId`` for a malformed id."""
        backend = self._backend()
        check_id(fact_id)
        # Another organization's fact is not this runtime's to delete (it may not even
        # supersede one): as if absent. Fact ids are never reused across organizations
        # (random, or derived from content that names the organization).
        stored = await anyio.to_thread.run_sync(backend.memory_get, fact_id)
        if stored is not None and not self._owns(stored):
            return False
        (answer,) = await self._committer.memory([ForgetFact(fact_id)])
        self._cache.drop(fact_id)
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    async def get(self, fact_id: str) -> Fact | None:
        """The stored fact (hidden or expired ones too), or None (also for another
        organization's fact: it belongs to that organization)."""
        backend = self._backend()
        check_id(fact_id)
        stored = await anyio.to_thread.run_sync(backend.memory_get, fact_id)
        return stored if stored is None or self._owns(stored) else None

    def _owns(self, fact: Fact) -> bool:
        """Whether this runtime may see ``fact``: every scope but another organization's."""
        return fact.scope is not Scope.ORGANIZATION or fact.organization == self._organization

    def _filter(
        self,
        scopes: object,
        domain: object,
        min_confidence: object = 0.0,
        include_hidden: object = False,
    ) -> FactFilter:
        if not isinstance(include_hidden, bool):
            raise TypeError("include_hidden must be a bool")
        return FactFilter(
            scopes=resolve_scopes(scopes, self._organization),
            domain=check_name(domain, "domain", optional=True),
            min_confidence=clamp_confidence(min_confidence, "min_confidence"),
            organization=self._organization,
            include_hidden=include_hidden,
        )

    async def search(
        self,
        query: str,
        *,
        scopes: Iterable[Scope | str] | Scope | str | None = None,
        domain: str | None = None,
        min_confidence: float = 0.0,
        limit: int = 10,
    ) -> MemorySearch:
        """The facts that best match ``query``, best first, at most ``limit`` (1..1,000).

        Only visible facts: not expired, not hidden by a current superseder, of at least
        ``min_confidence``, in ``scopes`` (None: every scope, ``organization`` included when
        configured) and ``domain`` (None: any). Ranked by the store's full-text rank or,
        with an embedder, by cosine similarity (scores above 0 only, ties by id); see
        :class:`MemorySearch` for the fallbacks. The query is redacted before it is used
        or sent to the embedder.

        A search is a live read: inside an agent it is not replayed on resume. To replay
        one, return what the agent uses of it from a ``ctx.step`` function, as storable
        values (the facts' ids and texts, say): a ``MemorySearch`` or a ``Fact`` is not
        storable, so returning one from a step raises ``ValueError``.
        """
        backend = self._backend()
        if not isinstance(query, str):
            raise TypeError(f"a query is a str, not {type(query).__name__}")
        if len(query) > MAX_FACT_TEXT:
            raise ValueError(f"a query is at most {MAX_FACT_TEXT} characters")
        where = self._filter(scopes, domain, min_confidence)
        limit = check_limit(limit)
        query = str(redact(query))
        fallback: Fallback | None = None
        detail = ""
        considered, capped = 0, False
        if self._embedder is not None:
            ranked = await rank_by_meaning(
                backend,
                self._embedder,
                self._cache,
                query,
                where,
                limit,
                cap=MAX_CANDIDATES,
                threads=self._threads,
            )
            considered, capped = ranked.considered, ranked.capped
            if ranked.fallback is None:
                hits = tuple(MemoryHit(fact=fact, score=score) for fact, score in ranked.hits)
                return MemorySearch(
                    hits=hits, ranking="cosine", considered=considered, capped=capped
                )
            fallback, detail = ranked.fallback, ranked.detail
            _logged_fallback(fallback, detail, considered)
        terms = query_terms(query)
        found = await anyio.to_thread.run_sync(
            lambda: backend.memory_search(terms, where, limit=limit)
        )
        return MemorySearch(
            hits=tuple(MemoryHit(fact=hit.fact, score=hit.score) for hit in found),
            ranking=backend.memory_ranking,
            fallback=fallback,
            detail=detail,
            considered=considered,
            capped=capped,
        )

    async def list(
        self,
        *,
        scopes: Iterable[Scope | str] | Scope | str | None = None,
        domain: str | None = None,
        include_hidden: bool = False,
        limit: int = 100,
        after: Fact | tuple[float, str] | None = None,
    ) -> builtins.list[Fact]:
        """Facts oldest first by (created_at, id), at most ``limit`` (1..1,000), after the
        fact (or ``(created_at, id)``) ``after``: pass a page's last fact for the next page.
        Visible facts only unless ``include_hidden`` (then expired and superseded too)."""
        backend = self._backend()
        where = self._filter(scopes, domain, include_hidden=include_hidden)
        limit = check_limit(limit)
        cursor = check_after(after)
        return await anyio.to_thread.run_sync(
            lambda: backend.memory_list(where, limit=limit, after=cursor)
        )


@final
class AgentMemory(Memory):
    """``ctx.memory``: :class:`Memory` for one run of an agent task.

    ``remember`` fills in the fact's provenance (``execution_id``, ``task_id``,
    ``step_id``) and gives it an id derived from the task, how many ``remember`` calls this
    run of the agent made before it, and the fact's content (its redacted text, scope,
    organization, domain, confidence and conflict group; not ``valid_until``, which agents
    often compute from the clock): a resumed agent that remembers the same thing at the
    same point gets the fact already stored, as stored (no duplicate, nothing superseded
    again). A fact whose content is not replayed (made by a model call outside
    ``ctx.step``) is a new fact on resume; one forgotten meanwhile is stored again.
    Concurrent ``remember`` calls of one agent are numbered in the order they are made.

    Reads (``search``, ``get``, ``list``) are live reads, not replayed on resume, like
    ``ctx.run``. To replay one, call it in a ``ctx.step`` function that returns what the
    agent uses of it as storable values (``[hit.fact.text for hit in found.hits]``): a
    ``MemorySearch`` or a ``Fact`` itself is not storable (the step raises ``ValueError``).
    """

    def __init__(self, base: Memory, *, execution_id: str, task_id: str, step_id: str) -> None:
        super().__init__(
            base._committer,
            organization=base._organization,
            embedder=base._embedder,
            cache=base._cache,
            threads=base._threads,
        )
        self._execution_id = execution_id
        self._task_id = task_id
        self._step_id = step_id
        self._remembered = 0

    async def remember(
        self,
        text: str,
        *,
        scope: Scope | str = "project",
        domain: str = "general",
        confidence: float = 1.0,
        valid_until: float | dt.datetime | None = None,
        conflict_group: str | None = None,
    ) -> Fact:
        """:meth:`Memory.remember`, with this task's provenance and a replay-stable id."""
        self._backend()
        fact = self._fact(text, scope, domain, confidence, valid_until, conflict_group)
        nth = self._remembered
        self._remembered += 1
        content = [
            fact.text,
            fact.scope.value,
            fact.organization,
            fact.domain,
            fact.confidence,
            fact.conflict_group,
        ]
        digest = sha256_hex([self._task_id, nth, content])
        fact = attrs.evolve(
            fact,
            id=f"fact-{digest[:32]}",
            execution_id=self._execution_id,
            task_id=self._task_id,
            step_id=self._step_id,
        )
        return await self._store(fact)
