"""Plans (``executions/_rules/plan.py``): the hash of a step's input, by which an agent task
is matched on resume (R8), is that of its stored form (redacted, the typed encoding, E10),
the same in every process whatever its hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings

import mainspring as ms
from mainspring.executions._rules.plan import step_input_hash
from mainspring.storage import PlanStep
from mainspring.storage._seam import sha256_hex
from tests._examples import examples

from ...strategies import holds_tag_key, json_values

REPO = Path(ms.__file__).parent.parent


@given(value=json_values)
@settings(max_examples=examples(200), deadline=None)
def test_the_hash_of_a_plain_input_is_what_it_always_was(value: Any) -> None:
    # A dict holding the reserved key "$ms" is escaped by the typed encoding (documented):
    # it is not plain JSON as stored, so its hash is not the plain one.
    assume(not holds_tag_key(value))
    step = PlanStep(id="s", agent="a", input={"value": value})
    assert step_input_hash(step) == sha256_hex(ms.storage.redact({"value": value}))


def test_the_hash_of_a_tagged_input_is_the_same_in_every_process() -> None:
    code = (
        "from mainspring.storage import PlanStep\n"
        "from mainspring.executions._rules.plan import step_input_hash\n"
        "words = {'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'}\n"
        "print(step_input_hash(PlanStep(id='s', agent='a', input={'w': words, "
        "'k': {frozenset(words): (1, b'x')}})))\n"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            capture_output=True,
            check=True,
            text=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(hashes) == 1, hashes  # set order differs between these processes; hashes don't
