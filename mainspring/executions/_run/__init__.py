"""The ExecutionActor and what it holds: the run's state, its commit funnel, its children,
its task book and the worker board (see ``_actor``'s docstring)."""

from .actor import ExecutionActor as ExecutionActor

__all__ = ["ExecutionActor"]
