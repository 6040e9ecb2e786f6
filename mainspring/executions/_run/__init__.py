"""_run of the executions package (see ARCHITECTURE.md)."""
