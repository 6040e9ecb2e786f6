"""Records, codec, backends, leases and the persistence actor (not built yet).

Planned: strict versioned attrs records with one cattrs converter, file and SQLite backends,
leases, checkpoints and redaction. It uses ``mainspring.actors``; nothing here imports
``mainspring.supervision``.
"""

__all__: list[str] = []
