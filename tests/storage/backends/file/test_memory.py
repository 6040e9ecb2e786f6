"""FileStore's memory database (``memory.sqlite3``) in a store directory that is read-only:
a reader still reads the facts (E7, U6), creating nothing, though SQLite cannot make the
``-wal`` and ``-shm`` files it reads a WAL database through (``tests._read_only_dir``)."""

from __future__ import annotations

from pathlib import Path

from mainspring.storage import FileStore
from mainspring.storage._seam import FactFilter
from tests._read_only_dir import read_only_directory
from tests.storage._memory_kit import fact, remember


def entries(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_E7_U6_a_file_store_s_memory_in_a_read_only_directory_is_read(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = FileStore(root)
    try:
        remember(store, fact("f-1", "deploy notes"))
    finally:
        store.close()
    for suffix in ("-wal", "-shm"):  # as after its last writer closed
        assert not (root / f"memory.sqlite3{suffix}").exists()
    before = entries(root)
    with read_only_directory(root):
        reader = FileStore(root, read_only=True)
        try:
            assert [f.id for f in reader.memory_list(FactFilter(), limit=10)] == ["f-1"]
        finally:
            reader.close()
        assert entries(root) == before
