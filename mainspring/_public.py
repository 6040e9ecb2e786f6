"""The tiers of the public surface, written once: which names the top level holds (and
which of them load on first use), and how classes come to name their public home.

Every public name lives in exactly one namespace: the top level (``mainspring``), or
``mainspring.actors`` (the overseer contract), ``mainspring.supervision``,
``mainspring.storage``, ``mainspring.executions``, ``mainspring.events`` (the run events),
``mainspring.testing``. ``tests/test_exports.py`` checks it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from .actors import open_system as _kernel_open_system

F = TypeVar("F", bound=Callable[..., Any])

#: Top-level names from the kernel, loaded with ``import mainspring``.
KERNEL = (
    "Actor", "ActorDeadError", "ActorFailed", "ActorRef", "ActorSystem",
    "AskTimeout", "BudgetExhausted", "Cancel", "CancelReason", "Crash", "EventsDropped",
    "IllegalTransition", "LeaseLost", "MailboxFull", "MainspringError", "NameTaken",
    "ParentCancel", "Pause", "Shutdown", "Stop", "Terminated", "Timeout", "Timer",
    "cancel_reason", "current_actor", "open_system",
)  # fmt: skip

#: Top-level names loaded on first use, with the namespace each comes from.
LAZY: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "open_runtime",
            "Runtime",
            "ExecutionHandle",
            "ExecutionResult",
            "AgentContext",
            "PlannerContext",
            "ClarificationNeeded",
            "ExecutionBusy",
            "UnknownExecution",
            "InvalidPlan",
            "WithUsage",
        ),
        "executions",
    ),
    **dict.fromkeys(("Plan", "PlanStep", "StorageError"), "storage"),
}

TOP_LEVEL = frozenset((*KERNEL, *LAZY))


def publish(namespace: str, scope: Mapping[str, object], names: Iterable[str]) -> None:
    """Make each exception class among ``names`` report where users import it from (in
    tracebacks and reprs): ``mainspring`` for a top-level name, else ``namespace``.

    Only exceptions, whose names users read in tracebacks and catch by: other classes keep
    their defining module, which ``inspect.getsource`` (IPython's ``??``, Sphinx) and
    ``typing`` need. The price, as in trio: ``inspect.getsource`` does not find an error's
    source.
    """
    for name in (*names, *(n for n in scope if n in TOP_LEVEL)):
        value = scope.get(name)
        if isinstance(value, type) and issubclass(value, BaseException):
            value.__module__ = "mainspring" if name in TOP_LEVEL else namespace


def _with_supervision(open_: F) -> F:
    @functools.wraps(open_)
    def opened(*args: Any, **kwargs: Any) -> Any:
        # Supervision is imported here, on first use, so that `import mainspring` does not pay
        # for it; and the root is passed, not registered: there is no global to plug into.
        from .supervision import RootSupervisor

        kwargs.setdefault("root", RootSupervisor)
        return open_(*args, **kwargs)

    return opened  # type: ignore[return-value]


#: ``mainspring.open_system``: the kernel's, with the root supervisor (restarts by rule).
open_system = _with_supervision(_kernel_open_system)
