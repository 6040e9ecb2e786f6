"""_rules of the executions package (see ARCHITECTURE.md)."""
