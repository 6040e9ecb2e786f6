"""Supervisors, durable executions and the Runtime facade (not built yet).

Planned: supervisors with restart strategies and intensity, the ExecutionActor and
AgentTaskActor, plan scheduling. It will use ``mainspring.actors`` and talk to storage only
through the persistence actor's messages.
"""

__all__: list[str] = []
