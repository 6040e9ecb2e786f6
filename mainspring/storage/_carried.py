"""A step's output's stored bytes, carried beside its observation from where they were made
to the store that writes them (E10), outside the record.

``executions/_steps/outputs.py`` encodes a step's output once (``storage._values.Encoded``)
and the step's actor hands those bytes on here with the observation it makes
(:func:`carry_encoded`); the record codec takes them when it writes that very observation
(:func:`take_carried`, ``storage._record_codec.stored_observation``) instead of encoding the
output again. The bytes are not a field of :class:`Observation`: a record a user holds is
plain data (``attrs.asdict``, ``json.dumps``), and no user can make an observation whose
stored bytes differ from its output.

The table is keyed by the observation object (its id, checked through a weak reference):
an evolved copy is another object and is encoded afresh; an entry leaves when the bytes are
taken (one write: a retry or a compaction encodes again) or when its observation is freed
(one never written keeps nothing). Any thread may carry or take: each is one dict
operation, atomic under the interpreter lock, and an id cannot be reused before the weak
reference's callback has removed the entry of the object that held it.
"""

from __future__ import annotations

import functools
import weakref

from ._records import Observation
from ._values import Encoded

__all__ = ["carried", "carry_encoded", "take_carried"]

_carried: dict[int, tuple[weakref.ref[Observation], Encoded]] = {}


def carry_encoded(observation: Observation, encoded: Encoded | None) -> Observation:
    """Carry ``encoded`` (the bytes of ``observation.output``) to the store beside
    ``observation``; returns ``observation``. Nothing for None."""
    if encoded is not None:
        key = id(observation)
        # Freed unwritten: the callback, pop(key, the dead reference), drops the entry.
        forget = functools.partial(_carried.pop, key)
        _carried[key] = (weakref.ref(observation, forget), encoded)
    return observation


def take_carried(observation: Observation) -> bytes | None:
    """The bytes carried beside ``observation``, once, if they encode its output (the very
    object they were made of); None otherwise (the caller encodes the output as usual)."""
    entry = _carried.pop(id(observation), None)
    if entry is None:
        return None
    ref, encoded = entry
    if ref() is not observation:
        return None
    return encoded.take(observation.output)


def carried() -> int:
    """How many observations have bytes carried beside them now (for tests)."""
    return len(_carried)
