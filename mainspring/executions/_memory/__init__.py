"""_memory of the executions package (see ARCHITECTURE.md)."""
