"""_workers of the executions package (see ARCHITECTURE.md)."""
