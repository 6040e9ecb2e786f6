"""Agent memory as stored: facts, the writes a backend applies, and the rules every backend
shares (supersession, delete re-linking, what a search may show).

A *fact* is a short, already redacted text in a scope (``user``, ``project``, ``repository``
or ``organization``), with a domain, a confidence in 0..1, an optional end of validity and
its provenance (execution, task, step). Facts outlive runs: they are stored beside the
executions, in the same database (SQLite, PostgreSQL; a file store keeps them in an SQLite
file of its directory), and written only by the persistence actor (``MemoryWrite`` batches,
one transaction per flush). Reads never write.

The rules (each backend implements them in one transaction; ``tests/storage`` checks every
backend against a reference model):

- *RememberFact* stores a new fact. If it names a ``conflict_group``, every other fact of that
  group that is not superseded (``superseded_by is None``) and that its writer could see is
  marked superseded by the new one: supersession crosses scopes but never organizations, so
  the targets are the group's facts of every scope but ``organization``, and the
  organization facts of the writer's own organization (``RememberFact.organization``); an
  organization's facts are never hidden by a writer of another organization, or of none.
  A fact whose id is already stored is not written again: the stored one is the answer (an
  agent's replayed ``remember`` is idempotent). A new fact names no superseder
  (``superseded_by`` None): only these rules supersede a fact, so every ``superseded_by``
  names a stored fact of the same group, remembered later, and chains have no cycles
  (:func:`check_write` refuses anything else).
- *ForgetFact* deletes one fact atomically: every fact it superseded is re-linked to the fact
  that superseded it (its heir, or None when it had none, which makes them current again),
  and no stored fact names it any more.
- *Visible* (search and the default listing): not expired (``valid_until`` is None or in
  the future), confidence at least the filter's minimum, in the filter's scopes and domain,
  and not *hidden*: a fact is hidden while any fact along its chain of superseders (its
  superseder, that one's superseder, ...) is unexpired. An expired superseder hides nothing
  by itself, so when every newer fact of a chain has lapsed the older one applies again.
- *Unreadable rows* (a stored row that does not read back as a ``Fact``: damaged, or
  written by something else) are never shown nor coerced, but take part in the rules by
  their stored columns, the same on every backend: a new fact of their group supersedes
  them, a forget re-links them (and forgetting one deletes it, its facts passing to its
  stored superseder), and as a superseder one hides what it supersedes (nothing
  shows it has expired, so it counts as unexpired, through the whole chain).
"""

from __future__ import annotations

import enum
import math
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ._ids import check_id
from ._validators import _id, _optional_id

__all__ = [
    "MAX_FACT_TEXT",
    "MAX_QUERY_TERMS",
    "MAX_SEARCH_LIMIT",
    "Fact",
    "FactFilter",
    "ForgetFact",
    "MemoryBackend",
    "MemoryWrite",
    "RememberFact",
    "Scope",
    "TextHit",
    "hidden",
    "new_fact_id",
    "query_terms",
]

#: The longest fact text, in characters (after redaction).
MAX_FACT_TEXT = 4_096
#: The most results one search or listing page returns.
MAX_SEARCH_LIMIT = 1_000
#: The most distinct terms a text query keeps (the first ones, in order).
MAX_QUERY_TERMS = 32
#: The longest domain or conflict group name.
MAX_NAME = 128


class Scope(enum.StrEnum):
    """Where a fact applies. ``organization`` exists only on a runtime configured with one."""

    USER = "user"
    PROJECT = "project"
    REPOSITORY = "repository"
    ORGANIZATION = "organization"


def _text(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not str or not value.strip() or len(value) > MAX_FACT_TEXT:
        raise ValueError(f"{attribute.name} must be 1..{MAX_FACT_TEXT} characters of text")
    if "\0" in value:
        raise ValueError(f"{attribute.name} must not contain NUL")
    try:  # every backend stores UTF-8: a lone surrogate is refused here, for all of them
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{attribute.name} must be valid Unicode (no lone surrogates)") from None


def _name(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if type(value) is not str or not 0 < len(value) <= MAX_NAME:
        raise ValueError(f"{attribute.name} must be 1..{MAX_NAME} characters")
    _id(None, attribute, value)


def _domain(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:  # a fact always has a domain ("general" by default)
        raise ValueError(f"{attribute.name} must be 1..{MAX_NAME} characters")
    _name(instance, attribute, value)


def _confidence(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) not in (int, float) or not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be within 0..1, not {value!r}")


def _time(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a finite time in seconds, not {value!r}")


def _scope(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Scope):
        raise ValueError(f"{attribute.name} must be a Scope, not {value!r}")  # noqa: TRY004 - a record error


@attrs.frozen(kw_only=True)
class Fact:
    """One remembered fact, as stored (its text already redacted).

    ``organization`` names the organization of an ``organization``-scoped fact (and is None
    for every other scope). ``superseded_by`` is the id of the fact that replaced it in its
    conflict group. ``execution_id``, ``task_id`` and ``step_id`` say where it came from
    (None when remembered outside a run).
    """

    id: str = attrs.field(validator=_id)
    text: str = attrs.field(validator=_text)
    scope: Scope = attrs.field(validator=_scope)
    domain: str = attrs.field(default="general", validator=_domain)
    confidence: float = attrs.field(default=1.0, validator=_confidence)
    valid_until: float | None = attrs.field(default=None, validator=_time)
    conflict_group: str | None = attrs.field(default=None, validator=_name)
    superseded_by: str | None = attrs.field(default=None, validator=_optional_id)
    organization: str | None = attrs.field(default=None, validator=_optional_id)
    created_at: float = attrs.field(default=0.0, validator=_time)
    execution_id: str | None = attrs.field(default=None, validator=_optional_id)
    task_id: str | None = attrs.field(default=None, validator=_optional_id)
    step_id: str | None = attrs.field(default=None, validator=_optional_id)

    def __attrs_post_init__(self) -> None:
        if (self.scope is Scope.ORGANIZATION) != (self.organization is not None):
            raise ValueError("organization is set exactly on organization-scoped facts")
        if self.superseded_by == self.id:
            raise ValueError("a fact cannot supersede itself")

    def expired(self, now: float) -> bool:
        """Whether the fact is past its ``valid_until`` at ``now`` (never, without one)."""
        return self.valid_until is not None and self.valid_until <= now


def new_fact_id() -> str:
    """A fresh fact id (``fact-`` and 32 random hex digits)."""
    return f"fact-{secrets.token_hex(16)}"


@attrs.frozen(kw_only=True)
class FactFilter:
    """What a search or listing may return.

    ``scopes`` None means every scope except ``organization`` unless ``organization`` names
    one (then that organization's facts too); an explicit ``Scope.ORGANIZATION`` needs
    ``organization``. ``now`` None means the backend's clock. ``include_hidden`` (listings
    only) also returns expired, superseded and low-confidence facts. ``execution_id``
    admits only the facts that run remembered (what a view of one run lists).
    """

    scopes: frozenset[Scope] | None = None
    domain: str | None = attrs.field(default=None, validator=_name)
    min_confidence: float = attrs.field(default=0.0, validator=_confidence)
    organization: str | None = attrs.field(default=None, validator=_optional_id)
    now: float | None = attrs.field(default=None, validator=_time)
    include_hidden: bool = False
    execution_id: str | None = attrs.field(default=None, validator=_optional_id)

    def __attrs_post_init__(self) -> None:
        if self.scopes is not None:
            if type(self.scopes) is not frozenset or not all(
                isinstance(s, Scope) for s in self.scopes
            ):
                raise ValueError("scopes must be a frozenset of Scope")
            if Scope.ORGANIZATION in self.scopes and self.organization is None:
                raise ValueError("the organization scope needs an organization")

    def scope_list(self) -> list[Scope]:
        """The scopes this filter admits, in a stable order."""
        wanted = self.scopes
        if wanted is None:
            wanted = (
                frozenset(Scope)
                if self.organization is not None
                else (frozenset(Scope) - {Scope.ORGANIZATION})
            )
        return [scope for scope in Scope if scope in wanted]

    def admits(self, fact: Fact) -> bool:
        """Scope, organization, domain, execution and confidence (not expiry or
        supersession)."""
        if fact.scope not in self.scope_list():
            return False
        if self.execution_id is not None and fact.execution_id != self.execution_id:
            return False
        if fact.scope is Scope.ORGANIZATION and fact.organization != self.organization:
            return False
        if self.domain is not None and fact.domain != self.domain:
            return False
        return fact.confidence >= self.min_confidence


@attrs.frozen
class TextHit:
    """A fact and its full-text score (higher is better, whatever the backend's scale)."""

    fact: Fact
    score: float


def _writer_organization(write: RememberFact) -> str | None:
    organization: str | None = getattr(write.fact, "organization", None)
    return organization


@attrs.frozen
class RememberFact:
    """A write: store ``fact`` (see the module's rules).

    ``organization`` is the writer's organization (the runtime's): which organization's
    facts the new one may supersede. It defaults to the fact's own (None for a fact of
    another scope), and an organization fact is written only by its own organization.
    """

    fact: Fact
    organization: str | None = attrs.field(
        default=attrs.Factory(_writer_organization, takes_self=True),
        validator=_optional_id,
        kw_only=True,
    )

    def __attrs_post_init__(self) -> None:
        fact = self.fact
        if (
            isinstance(fact, Fact)
            and fact.scope is Scope.ORGANIZATION
            and fact.organization != self.organization
        ):
            raise ValueError("an organization fact is written by its own organization")


@attrs.frozen
class ForgetFact:
    """A write: delete the fact ``fact_id`` (see the module's rules)."""

    fact_id: str = attrs.field(validator=_id)


MemoryWrite = RememberFact | ForgetFact


@runtime_checkable
class MemoryBackend(Protocol):
    """What a store provides for memory (``FileStore``, ``SqliteStore``, ``PostgresStore``).

    Every method blocks (the runtime calls them off the event loop). ``memory_apply`` is
    the only writer and is called by the persistence actor alone.
    """

    #: The name of the full-text ranking (``"bm25"`` on SQLite's FTS5, ``"ts_rank"`` on
    #: PostgreSQL's text search): what a search reports it ranked with.
    memory_ranking: str

    def memory_apply(self, writes: Sequence[MemoryWrite]) -> tuple[Fact | bool | Exception, ...]:
        """Apply ``writes`` in order, in one transaction: a ``RememberFact`` answers the stored
        fact (the one already stored under its id, if any), a ``ForgetFact`` whether the fact
        existed. A write that cannot be applied (an invalid fact) answers its exception and
        changes nothing; a failure of the store (``OSError``) raises and applies nothing."""
        ...

    def memory_get(self, fact_id: str) -> Fact | None:
        """The stored fact, or None."""
        ...

    def memory_list(
        self, where: FactFilter, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[Fact]:
        """Facts the filter admits (visible ones only unless ``include_hidden``), oldest
        first by ``(created_at, id)``, starting after ``after``; at most ``limit``."""
        ...

    def memory_search(
        self, terms: Sequence[str], where: FactFilter, *, limit: int
    ) -> list[TextHit]:
        """Visible facts matching any of ``terms`` (from :func:`query_terms`), best first by
        the backend's full-text rank, ties by id; at most ``limit``. No terms: no hits."""
        ...

    def memory_count(self) -> int:
        """How many facts are stored."""
        ...


# A word's letters, or one character that is neither a letter nor a space (a mark glues to
# the word before it; anything else ends it).
_PIECE = re.compile(r"(\w+)|([^\w\s])|\s+")


def _words(text: str) -> Iterator[str]:
    """The words of ``text``: runs of letters, digits and ``_``, with the combining marks
    inside or after them (a vowel sign, a virama, the dot ``İ`` lowercases to): cut at
    each mark, a Devanagari or Hebrew word would become fragments no index holds."""
    word = ""
    for match in _PIECE.finditer(text):
        letters, other = match.groups()
        if letters is not None:
            word += letters
        elif other is not None and word and unicodedata.category(other).startswith("M"):
            word += other
        elif word:
            yield word
            word = ""
    if word:
        yield word


def query_terms(query: str) -> list[str]:
    """The words of a text query, lowercased, first occurrence kept, at most
    :data:`MAX_QUERY_TERMS`. Only letters, digits, ``_`` and the combining marks of a word
    survive, so a term can never be read as query syntax by a backend (each still passes
    as a parameter)."""
    if type(query) is not str:
        raise TypeError(f"a query is text, not {type(query).__name__}")
    terms: list[str] = []
    for term in _words(query.lower()):
        if term not in terms:
            terms.append(term)
            if len(terms) == MAX_QUERY_TERMS:
                break
    return terms


def hidden(
    fact: Fact,
    superseder: Callable[[str], Fact | None],
    now: float,
    *,
    stored: Callable[[str], bool],
) -> bool:
    """Whether ``fact`` is hidden by its chain of superseders (see the module's rules).
    ``superseder(id)`` looks a fact up (None: none reads back under that id), ``stored(id)``
    says whether a row is stored under it all the same (one that does not read back: it
    hides, as an unexpired superseder does). A chain is walked at most once around (a
    cycle, which no backend writes, hides nothing more)."""
    seen = {fact.id}
    next_id = fact.superseded_by
    while next_id is not None and next_id not in seen:
        seen.add(next_id)
        newer = superseder(next_id)
        if newer is None:
            return stored(next_id)
        if not newer.expired(now):
            return True
        next_id = newer.superseded_by
    return False


def check_limit(limit: object) -> int:
    """``limit`` if it is a whole number in 1..:data:`MAX_SEARCH_LIMIT`; ValueError otherwise."""
    if type(limit) is not int or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be a whole number in 1..{MAX_SEARCH_LIMIT}, not {limit!r}")
    return limit


def check_where(where: object) -> FactFilter:
    """``where`` if it is a :class:`FactFilter`; ``TypeError`` otherwise."""
    if not isinstance(where, FactFilter):
        raise TypeError(f"a memory read takes a FactFilter, not {type(where).__name__}")
    return where


def check_after(after: object) -> tuple[float, str] | None:
    """``after`` as a listing resumes from: None, or a ``(created_at, id)`` tuple of a finite
    number (not a bool) and a valid id; ``ValueError`` otherwise (``InvalidId`` for the id)."""
    if after is None:
        return None
    if (
        type(after) is not tuple
        or len(after) != 2
        or type(after[0]) not in (int, float)
        or not math.isfinite(after[0])
    ):
        raise ValueError(f"after must be a (created_at, id) pair, not {after!r}")
    return float(after[0]), check_id(after[1])


def check_terms(terms: object) -> list[str]:
    """``terms`` as a list: an iterable of str (one str is not; see :func:`query_terms`);
    ``TypeError`` otherwise."""
    if isinstance(terms, str | bytes) or not isinstance(terms, Iterable):
        raise TypeError(f"terms are a sequence of str (see query_terms), not {terms!r:.40}")
    listed = list(terms)
    if not all(type(term) is str for term in listed):
        raise TypeError("terms are a sequence of str (see query_terms)")
    return listed


def check_write(write: object) -> MemoryWrite:
    """``write`` as a backend applies it, checked again (a frozen record can still be forged
    or built around its validators): a :class:`RememberFact` of a valid :class:`Fact` that
    names no superseder, or a :class:`ForgetFact` of a valid id. Returns it rebuilt (every
    validator run); ``TypeError``/``ValueError`` otherwise: the answer for that write alone."""
    if isinstance(write, RememberFact):
        fact = write.fact
        if not isinstance(fact, Fact):
            raise TypeError(f"RememberFact takes a Fact, not {type(fact).__name__}")
        fact = attrs.evolve(fact)  # runs every validator and the cross-field checks again
        if fact.superseded_by is not None:
            raise ValueError("a new fact names no superseder: the rules supersede it later")
        return RememberFact(fact, organization=write.organization)
    if isinstance(write, ForgetFact):
        return ForgetFact(write.fact_id)
    raise TypeError(f"a memory write is RememberFact or ForgetFact, not {type(write).__name__}")


def relink(facts_naming: Sequence[Fact], gone: Fact) -> list[tuple[str, str | None]]:
    """``(id, new superseded_by)`` for every fact that named ``gone`` as its superseder: it
    is handed to ``gone``'s own superseder (its heir), or to None."""
    heir = gone.superseded_by
    return sorted((f.id, heir if heir != f.id else None) for f in facts_naming)
