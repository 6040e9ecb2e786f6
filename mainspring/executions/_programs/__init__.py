"""_programs of the executions package (see ARCHITECTURE.md)."""
