"""The records' converter hooks (storage/_record_codec.py) are made on the converter's first
use, once, not when storage is imported; made that way, from several threads at once, they
write and read exactly what they always did (E10: the same bytes)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mainspring.storage._codec import encode, hooks_made
from tests._examples import SHRINKING, examples

from ..strategies import record_values

#: Run in a fresh process: imports storage and the execution layer, says whether that made
#: any hook, then decodes and re-encodes the records given on stdin (hex, with their kind),
#: the first use from ``threads`` threads at once. Prints what each thread wrote, and how
#: many hooks cattrs generated for the records (once made, a second ``make_hooks`` makes none).
_CHILD = """
import json, sys, threading
import cattrs.gen
import mainspring.executions, mainspring.storage as storage
from mainspring.storage import _codec, _record_codec

made_at_import = _codec.hooks_made()
generated = 0
for name in ("make_dict_structure_fn", "make_dict_unstructure_fn"):
    real = getattr(cattrs.gen, name)
    def counting(*args, _real=real, **kwargs):
        global generated
        generated += 1
        return _real(*args, **kwargs)
    setattr(_record_codec, name, counting)

records = json.load(sys.stdin)
threads = int(sys.argv[1])
start = threading.Barrier(threads)
written = [None] * threads

def first_use(index):
    start.wait()
    _codec.converter.get_structure_hook(storage.Execution)  # a first use, records or none
    out = []
    for kind, data in records:
        record = _codec.decode(bytes.fromhex(data), getattr(storage, kind))
        out.append(_codec.encode(record).hex())
    written[index] = out

workers = [threading.Thread(target=first_use, args=(i,)) for i in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
once = generated
_codec.make_hooks()
print(json.dumps({"made_at_import": made_at_import, "made": _codec.hooks_made(),
                  "generated": once, "again": generated - once, "written": written}))
"""


def _first_use(records: list[Any], threads: int) -> dict[str, Any]:
    given = [[type(record).__name__, encode(record).hex()] for record in records]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(threads)],
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert [data for _, data in given] == result["written"][0]
    return result


def test_importing_storage_makes_no_hook_and_the_first_use_makes_them_once() -> None:
    """Importing storage (and the execution layer) generates no converter hook: the first
    use does, once, whether one thread or eight meet it at once."""
    alone = _first_use([], threads=1)
    assert alone["made_at_import"] is False
    assert alone["made"] is True
    assert alone["generated"] > 0
    assert alone["again"] == 0
    raced = _first_use([], threads=8)
    assert raced["generated"] == alone["generated"]  # not once per thread
    assert raced["again"] == 0
    assert hooks_made()  # here too (the conftest made them before the first test)


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@given(st.lists(record_values, min_size=1, max_size=25))
@settings(max_examples=examples(5), deadline=None)
def test_E10_hooks_made_on_first_use_from_racing_threads_write_the_same_bytes(
    records: list[Any],
) -> None:
    """Records written here, read and written again by hooks a fresh process made on first
    use, from four threads at once: every thread writes exactly these bytes (E10)."""
    written = _first_use(records, threads=4)["written"]
    assert all(out == written[0] for out in written)
