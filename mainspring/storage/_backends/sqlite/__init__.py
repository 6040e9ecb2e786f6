"""SqliteStore: its store (``store``), its tables and layout version (``schema``), agent
memory on SQLite (``memory``, also what FileStore's sidecar holds) and its evidence table
(``evidence``)."""
