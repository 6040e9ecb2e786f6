"""SqliteStore: its store and tables (``store``), agent memory on SQLite (``memory``, also
what FileStore's sidecar holds) and its evidence table (``evidence``)."""
