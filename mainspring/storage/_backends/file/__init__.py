"""FileStore: a journal of checksummed frames per execution (``frames``), its store
(``store``), its agent memory in a sidecar SQLite file (``memory``) and its sealed evidence
files (``evidence``)."""
