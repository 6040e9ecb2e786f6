"""_steps of the executions package (see ARCHITECTURE.md)."""
