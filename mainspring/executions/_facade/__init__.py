"""_facade of the executions package (see ARCHITECTURE.md)."""
