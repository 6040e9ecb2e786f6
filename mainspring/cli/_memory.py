"""``mainspring memory``: the facts agents remember, seen and forgotten from outside.

Every action opens the store read-only (E7). ``ls`` and ``search`` read it directly: a
search here ranks by the store's full-text rank (no embedder runs in the command).
``forget`` checks that the fact exists, then deletes it through a runtime on the store
opened for writing, so the write goes through the persistence actor like every other.
What is printed is redacted (E5); a fact's text is clamped to one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..storage import Fact, InvalidId, Scope, Store, redact
from ..storage._seam import FactFilter, MemoryBackend, check_id, query_terms
from ._codes import EXIT_NO_STORE, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, CliError
from ._output import Out, clamp, when

#: How much of a fact's text a line shows.
TEXT_WIDTH = 60


def check_memory_args(args: argparse.Namespace) -> None:
    """What needs no store, checked before anything is opened: a fact id is an id (X1),
    and the organization scope is asked for only with ``--organization``."""
    for fact_id in (getattr(args, "fact_id", None), getattr(args, "after", None)):
        if fact_id is not None:
            try:
                check_id(fact_id)
            except InvalidId:
                raise CliError(f"{fact_id!r} is not a valid fact id", EXIT_USAGE) from None
    scopes = getattr(args, "scopes", None) or ()
    if Scope.ORGANIZATION.value in scopes and args.organization is None:
        raise CliError("--scope organization needs --organization NAME", EXIT_USAGE)


def run_memory(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Run ``memory ACTION`` against ``store``; returns the exit code."""
    if not isinstance(store, MemoryBackend):
        raise CliError(f"this store ({type(store).__name__}) keeps no memory", EXIT_NO_STORE)
    action: Callable[[Any, Out, argparse.Namespace], int] = {
        "ls": _ls,
        "search": _search,
        "forget": _forget,
    }[args.memory_command]
    return action(store, out, args)


def nothing_remembered(out: Out, args: argparse.Namespace, why: str) -> int:
    """No store yet: listings and searches are empty, every fact id is unknown."""
    if args.memory_command == "forget":
        raise CliError(f"no fact {args.fact_id} ({why})", EXIT_UNKNOWN)
    if out.as_json:
        out.data([] if args.memory_command == "ls" else _search_data("bm25", []))
    else:
        out.line(f"no facts yet ({why})")
    return EXIT_OK


def _filter(args: argparse.Namespace, *, include_hidden: bool = False) -> FactFilter:
    scopes = frozenset(Scope(name) for name in args.scopes) if args.scopes else None
    return FactFilter(
        scopes=scopes,
        domain=args.domain,
        min_confidence=args.min_confidence,
        organization=args.organization,
        include_hidden=include_hidden,
    )


def fact_data(fact: Fact, now: float) -> dict[str, Any]:
    """A fact as the command's JSON gives it (stable keys, text redacted by ``Out``)."""
    return {
        "id": fact.id,
        "text": fact.text,
        "scope": fact.scope.value,
        "organization": fact.organization,
        "domain": fact.domain,
        "confidence": fact.confidence,
        "valid_until": fact.valid_until,
        "expired": fact.expired(now),
        "conflict_group": fact.conflict_group,
        "superseded_by": fact.superseded_by,
        "created_at": fact.created_at,
        "execution_id": fact.execution_id,
        "task_id": fact.task_id,
        "step_id": fact.step_id,
    }


def _marks(fact: Fact, now: float) -> str:
    marks = []
    if fact.superseded_by is not None:
        marks.append("superseded")
    if fact.expired(now):
        marks.append("expired")
    elif fact.valid_until is not None:
        marks.append(f"until {when(fact.valid_until)}")
    return ", ".join(marks) or "-"


def _row(fact: Fact, now: float) -> list[str]:
    scope = fact.scope.value
    if fact.organization is not None:
        scope += f":{fact.organization}"
    return [
        fact.id,
        scope,
        fact.domain,
        f"{fact.confidence:.2f}",
        _marks(fact, now),
        clamp(fact.text, TEXT_WIDTH),
    ]


_HEADERS = ["id", "scope", "domain", "conf", "state", "text"]


def _ls(store: Any, out: Out, args: argparse.Namespace) -> int:
    after: tuple[float, str] | None = None
    if args.after is not None:
        last = store.memory_get(args.after)
        if last is None:
            raise CliError(f"no fact {args.after} in this store (--after)", EXIT_UNKNOWN)
        after = (last.created_at, last.id)
    where = _filter(args, include_hidden=args.include_hidden)
    facts: list[Fact] = store.memory_list(where, limit=args.limit, after=after)
    now = store.now()  # the store's clock: a shared server's, not this host's
    if out.as_json:
        out.data([fact_data(fact, now) for fact in facts])
        return EXIT_OK
    if not facts:
        out.line("no facts" + (" after that one" if after is not None else ""))
        return EXIT_OK
    out.table(_HEADERS, [_row(fact, now) for fact in facts])
    if len(facts) == args.limit:
        out.line(f"(more may follow: --after {facts[-1].id})")
    return EXIT_OK


def _search_data(ranking: str, hits: list[tuple[Fact, float]], now: float = 0.0) -> Any:
    return {
        "ranking": ranking,
        "fallback": None,
        "hits": [{"score": score, "fact": fact_data(fact, now)} for fact, score in hits],
    }


def _search(store: Any, out: Out, args: argparse.Namespace) -> int:
    # Redacted before it is used, as the library does: a secret typed as a query is never
    # matched against (nor echoed).
    terms = query_terms(str(redact(args.query)))
    found = store.memory_search(terms, _filter(args), limit=args.limit) if terms else []
    hits = [(hit.fact, hit.score) for hit in found]
    now = store.now()
    ranking = str(store.memory_ranking)
    if out.as_json:
        out.data(_search_data(ranking, hits, now))
        return EXIT_OK
    if not terms:
        out.warn("the query has no words to search for")
    if not hits:
        out.line("no matching facts")
        return EXIT_OK
    out.table(
        ["score", *_HEADERS],
        [[f"{score:.3g}", *_row(fact, now)] for fact, score in hits],
    )
    out.line(f"(ranked by {ranking})")
    return EXIT_OK


def _forget(store: Any, out: Out, args: argparse.Namespace) -> int:
    """Every memory action opens the store read-only first: an unknown fact is reported
    before anything is opened for writing (nothing written, not even the memory tables of
    a store that has none yet). A known one is deleted through a runtime on the store
    opened again for writing, so the delete goes through the persistence actor."""
    import anyio

    # Imported here: reads never load the execution layer (or pay for its import).
    from ..executions import open_runtime
    from ._store import open_store

    stored = store.memory_get(args.fact_id)
    if stored is None:
        raise CliError(f"no fact {args.fact_id} in this store", EXIT_UNKNOWN)
    if stored.scope is Scope.ORGANIZATION and stored.organization != args.organization:
        # An organization's fact is its own (as ls and search show it only to it).
        raise CliError(
            f"fact {args.fact_id} is an organization's fact: pass its --organization",
            EXIT_UNKNOWN,
        )
    writable, close = open_store(args.store_path, write=True)

    async def forget() -> bool:
        # recover=False: forgetting a fact must not take over runs nobody runs (L8).
        async with open_runtime(
            store=writable, organization=args.organization, recover=False
        ) as rt:
            forgotten: bool = await rt.memory.forget(args.fact_id)
            return forgotten

    try:
        forgotten = anyio.run(forget)
    finally:
        close()
    if not forgotten:  # forgotten by someone else since it was read
        raise CliError(f"no fact {args.fact_id} in this store", EXIT_UNKNOWN)
    if out.as_json:
        out.data({"id": args.fact_id, "forgotten": True})
    else:
        out.line(f"{args.fact_id}: forgotten")
    return EXIT_OK
