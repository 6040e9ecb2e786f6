"""Tokens and cost: how skills report them, how a run checks its token and cost budgets,
and what a run waiting for budget says it needs (B3, P4).

A skill reports what its model call spent by returning :class:`WithUsage` (its value beside
a :class:`~mainspring.storage.Usage`); an agent that calls a model itself reports through
``ctx.report_usage(...)``. The runtime takes the value out before anything else sees it:
the step's output, ``ctx.call_skill``'s return value and what is stored are the value alone.

The rule for the budgets, since a model call's usage is known only after it returns: a
skill step, an agent step and an agent's ``ctx.call_skill`` are not started once the run's
tokens (input and output together) reached ``max_tokens`` or its cost reached ``max_cost``;
a call that overruns is charged in full (usage is accounting and never goes backwards, B3),
and the next start is refused. Tool steps spend no tokens and still run. The run then waits
for budget (``waiting_for_budget``, ``Pending(kind="budget")`` naming the budget) with its
work kept, and stops with ``BudgetExhausted``; ``resume(..., max_tokens=..., max_cost=...)``
with a higher limit goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

import attrs

from ...actors import BudgetExhausted
from ...storage import BudgetInfo, Failure, PlanStep, StepStatus, Usage
from ...storage._seam import MAX_COUNTER, check_cost, check_tokens

__all__ = [
    "Allowance",
    "Exhausted",
    "Meter",
    "WithUsage",
    "allowance",
    "budget_reason",
    "check_limits",
    "exhausted",
    "exhausted_detail",
    "needed_calls",
    "split_usage",
]

#: Which budget ran out.
Exhausted = Literal["calls", "tokens", "cost"]


def _usage(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Usage):
        raise TypeError(f"usage must be a mainspring.storage.Usage, not {type(value).__name__}")


@attrs.frozen
class WithUsage:
    """A skill's return value with what its model call spent:
    ``return WithUsage(text, usage=Usage(input_tokens=812, output_tokens=95, cost="0.0021"))``.

    The step's output (and ``ctx.call_skill``'s return value) is ``value``; ``usage`` is
    added to the run's (and the calling agent task's) totals. ``usage`` must be a
    :class:`~mainspring.storage.Usage`: its own checks refuse negative or non-finite numbers
    where it is built, so the step fails there and no total is touched.
    """

    value: Any
    usage: Usage = attrs.field(kw_only=True, validator=_usage)


def split_usage(result: Any) -> tuple[Any, Usage]:
    """A skill's result as (value, usage): a :class:`WithUsage` unwrapped, anything else as
    it is with no usage."""
    if isinstance(result, WithUsage):
        return result.value, result.usage
    return result, Usage()


def check_limits(max_tokens: Any, max_cost: Any) -> tuple[int | None, Decimal | None]:
    """``max_tokens`` and ``max_cost`` as given to ``open_runtime``, ``start`` or ``resume``
    (None: no limit / unchanged): ValueError or TypeError for a bad one, before anything
    is stored."""
    tokens = check_tokens(max_tokens, "max_tokens") if max_tokens is not None else None
    cost = check_cost(max_cost, "max_cost") if max_cost is not None else None
    return tokens, cost


def exhausted(
    usage: Usage, max_tokens: int | None, max_cost: Decimal | None
) -> Literal["tokens", "cost"] | None:
    """The budget ``usage`` has reached (tokens first), or None while both have room."""
    if max_tokens is not None and usage.tokens >= max_tokens:
        return "tokens"
    if max_cost is not None and usage.cost >= max_cost:
        return "cost"
    return None


def exhausted_detail(
    budget: Exhausted,
    usage: Usage,
    calls: tuple[int, int],
    max_tokens: int | None,
    max_cost: Decimal | None,
) -> str:
    """A sentence naming the budget that ran out and where the run stands (ids and counts
    only, V1): what ``BudgetExhausted.detail`` says."""
    if budget == "tokens":
        spent = f"{usage.tokens:,} of {max_tokens:,} tokens used"
    elif budget == "cost":
        spent = f"cost {usage.cost:f} of {max_cost:f} spent"
    else:
        spent = f"{calls[0]:,} of {calls[1]:,} calls used"
    return f"the {budget} budget is exhausted ({spent})"


def budget_reason(info: BudgetInfo, source: str) -> BudgetExhausted:
    """Why a run waiting for budget stopped: ``BudgetExhausted`` naming the budget."""
    calls = (info.calls_used, info.max_calls)
    detail = exhausted_detail(info.budget, info.usage, calls, info.max_tokens, info.max_cost)
    return BudgetExhausted(detail=detail, source=source)


def needed_calls(
    steps: Iterable[PlanStep],
    status: Mapping[str, StepStatus],
    reservation: Callable[[int], int],
) -> int:
    """P4: the calls the steps not yet finished or running would hold if the budget had
    room for all of them: a skill 1, an agent its reservation (what ``reservation`` gives
    when nothing bounds it, at least 1), a tool 0. Bounded like every counter."""
    agent = None
    total = 0
    for step in steps:
        if status.get(step.id, "pending") != "pending" or step.kind == "tool":
            continue
        if step.kind == "skill":
            total += 1
            continue
        if agent is None:
            agent = max(int(reservation(MAX_COUNTER)), 1)
        total += agent
    return min(total, MAX_COUNTER)


class Meter:
    """Model calls an agent task has made so far, shared with its execution so that calls
    made before an interruption are charged even if no save recorded them (P4, E9); and,
    when the task's actor crashed, why (``crash``: the exception's type and redacted
    traceback, for the execution to keep on the task and log once, O2)."""

    __slots__ = ("calls_used", "crash", "usage")

    def __init__(self, calls_used: int = 0, usage: Usage | None = None) -> None:
        self.calls_used = calls_used
        self.usage = usage if usage is not None else Usage()  # tokens and cost alike (B3)
        self.crash: Failure | None = None


TokenReservation = Callable[[int], int]
CostReservation = Callable[[Decimal], Decimal | int | float | str]


@attrs.frozen(kw_only=True)
class Allowance:
    """What one agent task may spend of tokens and cost in this run: its reservation, from
    ``token_reservation`` / ``cost_reservation`` of what the run had left when it started
    (P4's reservation, for tokens and cost). ``start`` is the task's usage then."""

    start: Usage
    tokens: int | None = None
    cost: Decimal | None = None

    def over(self, usage: Usage) -> str | None:
        """Why a task whose usage is now ``usage`` may make no more model calls, or None."""
        spent = usage.since(self.start)
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"the task's {self.tokens:,} reserved tokens are used"
        if self.cost is not None and spent.cost >= self.cost:
            return f"the task's reserved cost {self.cost:f} is spent"
        return None


def allowance(
    task: Usage,
    run: Usage,
    limits: tuple[int | None, Decimal | None],
    reservations: tuple[TokenReservation | None, CostReservation | None],
) -> Allowance | None:
    """The allowance of an agent task starting now (None: it may spend what the run has).
    A reservation is asked only for a budget the run has; what it gives is held within
    ``0..remaining`` (at least 1 token, so a task that starts can make a call)."""
    max_tokens, max_cost = limits
    token_fn, cost_fn = reservations
    tokens = cost = None
    if token_fn is not None and max_tokens is not None:
        remaining = max(max_tokens - run.tokens, 0)
        tokens = min(max(int(token_fn(remaining)), 1), max(remaining, 1))
    if cost_fn is not None and max_cost is not None:
        left = max(max_cost - run.cost, Decimal(0))
        cost = min(check_cost(cost_fn(left), "a cost reservation"), left)
    if tokens is None and cost is None:
        return None
    return Allowance(start=task, tokens=tokens, cost=cost)
