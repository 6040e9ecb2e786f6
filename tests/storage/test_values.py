"""The typed encoding of step results and step inputs (E10): what a store hands back is the
value that was stored (same types, ``==``, NaN for NaN), or it was refused at the start,
naming the path; a stored value that does not decode is a RecordError, never a guess."""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import tempfile
import uuid
import zoneinfo
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings

import mainspring as ms
from mainspring.storage import Execution, FileStore, Observation, RecordError, SqliteStore
from mainspring.storage._codec import decode, encode, raw_form, structure, unstructure
from mainspring.storage._records import Plan, PlanStep
from mainspring.storage._seam import decode_value, encode_value
from tests._examples import SHRINKING, examples

from .._exact import same
from ..strategies import exact_values, holds_tag_key, json_values

REPO = Path(ms.__file__).parent.parent

#: The coercions the issue found, each with the value the old converter handed back.
COERCED = {
    "datetime": (dt.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05"),
    "bytes": (b"\x00\xff", "0RI"),
    "set": ({1, 2, 3}, [1, 2, 3]),
    "tuple": ((1, 2), [1, 2]),
    "tuple-key": ({(1, 2): "pair"}, {"(1, 2)": "pair"}),
}


def _record(value: Any) -> Execution:
    step = PlanStep(id="s", tool="t", input={"value": value})
    return Execution(
        id="ex-1",
        goal="g",
        plan=Plan(id="p", goal="g", steps=(step,)),
        observations=(Observation(step_id="s", tool="t", ok=True, output=value),),
        created_at=1.0,
        updated_at=1.0,
    )


def _through(kind: str, value: Any, where: Path) -> tuple[Any, Any]:
    """``value`` as a step output and a step input, written to a real store and read back
    through a fresh handle (another process would see the same)."""
    if kind == "file":
        FileStore(where / "files").create(_record(value))
        back = FileStore(where / "files").get("ex-1")
    else:
        writer = SqliteStore(where / "db.sqlite3")
        writer.create(_record(value))
        writer.close()
        reader = SqliteStore(where / "db.sqlite3")
        back = reader.get("ex-1")
        reader.close()
    assert back is not None
    assert back.plan is not None
    return back.observations[0].output, back.plan.steps[0].input["value"]


@pytest.mark.timeout(SHRINKING)  # a failure's shrinking may outlast 120 s (tests/_examples.py)
@pytest.mark.parametrize("kind", ["file", "sqlite"])
@given(value=exact_values)
@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_E10_every_storable_value_reads_back_exactly_from_each_store(kind: str, value: Any) -> None:
    with tempfile.TemporaryDirectory() as where:
        output, step_input = _through(kind, value, Path(where))
    assert same(output, value), (value, output)
    assert same(step_input, value), (value, step_input)


@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("name", sorted(COERCED))
def test_E10_the_coercions_the_issue_found_are_gone(kind: str, name: str, tmp_path: Path) -> None:
    value, coerced = COERCED[name]
    output, step_input = _through(kind, value, tmp_path)
    assert output == value
    assert type(output) is type(value)
    assert output != coerced
    assert same(step_input, value)


@given(value=json_values)
@settings(max_examples=examples(300), deadline=None)
def test_plain_json_is_stored_as_it_is_without_a_copy(value: Any) -> None:
    # A dict holding the reserved key "$ms" is escaped (documented, and shown by the test of
    # the tagged form below); Hypothesis does draw that key, a string in the code under test.
    assume(not holds_tag_key(value))
    assert encode_value(value) is value  # the fast path on every commit
    assert decode_value(value) is value
    # What the record holds on disk is the JSON it always was: old records still read.
    assert raw_form(Observation(step_id="s", ok=True, output=value))["output"] is value


@given(value=exact_values)
@settings(max_examples=examples(300), deadline=None)
def test_equal_values_store_equal_bytes(value: Any) -> None:
    # Sets and non-string keys are sorted by their stored form: a step input hashes alike in
    # every process, whatever the set's iteration order there.
    stored = orjson.dumps(encode_value(value), option=orjson.OPT_SORT_KEYS)
    again = decode_value(orjson.loads(stored))
    assert orjson.dumps(encode_value(again), option=orjson.OPT_SORT_KEYS) == stored


def test_the_tagged_form_is_documented_json() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2), "CEST"))
    paris = dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    value = {
        "t": (1, "a"),
        "s": {3, 1, 2},
        "f": frozenset({"x"}),
        "b": b"\x00\xff",
        "when": when,
        "paris": paris,
        "day": dt.date(2024, 1, 2),
        "at": dt.time(3, 4),
        "took": dt.timedelta(days=-1, seconds=5),
        "price": decimal.Decimal("1.10"),
        "id": uuid.UUID(int=1),
        "big": 2**70,
        "inf": float("-inf"),
        "pairs": {(1, 2): "pair"},
        "$ms": "user data, not a tag",
    }
    assert encode_value(value) == {
        "$ms": "dict",
        "v": [
            ["$ms", "user data, not a tag"],
            ["at", {"$ms": "time", "v": "03:04:00"}],
            ["b", {"$ms": "bytes", "v": "AP8="}],
            ["big", {"$ms": "int", "v": "0x400000000000000000"}],
            ["day", {"$ms": "date", "v": "2024-01-02"}],
            ["f", {"$ms": "frozenset", "v": ["x"]}],
            ["id", {"$ms": "uuid", "v": "00000000-0000-0000-0000-000000000001"}],
            ["inf", {"$ms": "float", "v": "-inf"}],
            ["pairs", {"$ms": "dict", "v": [[{"$ms": "tuple", "v": [1, 2]}, "pair"]]}],
            ["paris", {"$ms": "datetime", "v": "2024-10-27T02:30:00", "zone": "Europe/Paris",
                       "fold": 1}],
            ["price", {"$ms": "decimal", "v": "1.10"}],
            ["s", {"$ms": "set", "v": [1, 2, 3]}],
            ["t", {"$ms": "tuple", "v": [1, "a"]}],
            ["took", {"$ms": "timedelta", "v": [-1, 5, 0]}],
            ["when", {"$ms": "datetime", "v": "2024-01-02T03:04:05.000006",
                      "offset": 7_200_000_000, "name": "CEST"}],
        ],
    }  # fmt: skip
    assert encode_value({"a": (1,)}) == {"a": {"$ms": "tuple", "v": [1]}}
    plain = {"a": "$ms", "b": ["$ms", 'say "$ms"'], "c": {"v": "$ms"}}  # no tag, only text
    assert encode_value(plain) is plain
    assert decode_value(orjson.loads(orjson.dumps(plain))) == plain
    back = decode_value(orjson.loads(orjson.dumps(encode_value(value))))
    assert same(back, value)
    assert back["paris"].fold == 1
    assert back["when"].tzname() == "CEST"


# -- refused at the step ---------------------------------------------------------------------


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Name(enum.StrEnum):
    ADA = "ada"


class Point(NamedTuple):
    x: int


class Custom:
    pass


class Local(dt.tzinfo):
    def utcoffset(self, _: Any) -> dt.timedelta:
        return dt.timedelta(hours=1)


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


REFUSED: dict[str, tuple[Any, str]] = {
    "object": (object(), "a value of type object cannot be stored exactly"),
    "custom class": (Custom(), "a value of type Custom cannot be stored exactly"),
    "complex": (1j, "a value of type complex cannot be stored exactly"),
    "enum": (Color.RED, "a value of type Color cannot be stored exactly"),
    "IntEnum": (Level.LOW, "Level (a subclass of int) cannot be stored exactly"),
    "StrEnum": (Name.ADA, "Name (a subclass of str)"),
    "namedtuple": (Point(1), "Point (a subclass of tuple)"),
    "OrderedDict": (collections.OrderedDict(a=1), "OrderedDict (a subclass of dict)"),
    "defaultdict": (collections.defaultdict(list), "defaultdict (a subclass of dict)"),
    "bytearray": (bytearray(b"x"), "a value of type bytearray"),
    "other tzinfo": (dt.datetime(2024, 1, 1, tzinfo=Local()), "a time zone of type Local"),
    "cycle": (_cycle(), "nested more than 200 levels deep"),
    "too deep": (_deep(201), "nested more than 200 levels deep"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_E10_everything_else_is_refused_naming_the_path(name: str) -> None:
    value, message = REFUSED[name]
    with pytest.raises(ValueError, match=r"^\S+: ") as info:
        encode_value({"rows": [0, {"when": value}]})
    assert message in str(info.value)
    if name not in ("cycle", "too deep"):
        assert str(info.value).startswith("rows[1].when: ")
    with pytest.raises(ValueError, match=r"^\[\(1, 2\)\]") as info:
        encode_value({(1, 2): {value} if name in ("object", "complex") else value})
    assert message in str(info.value)
    assert encode_value(_deep(199)) == _deep(199)


def test_a_refused_dict_key_or_set_member_is_named() -> None:
    with pytest.raises(ValueError, match=r"^a\[key \(1, 1j\)\]\[1\]: a value of type complex"):
        encode_value({"a": {(1, 1j): "x"}})
    with pytest.raises(ValueError, match=r"^a\[\(1, 2\)\]: a value of type object"):
        encode_value({"a": {(1, 2): object()}})
    with pytest.raises(ValueError, match=r"^\{Level.LOW: 1\}|^\{<Level.LOW: 1>\}"):
        encode_value({Level.LOW})


# -- strict on read --------------------------------------------------------------------------

MALFORMED: list[tuple[Any, str]] = [
    ({"$ms": "nope", "v": 1}, "unknown tag 'nope'"),
    ({"$ms": 3, "v": 1}, "unknown tag 3"),
    ({"$ms": "tuple"}, "tag 'tuple': missing v"),
    ({"$ms": "tuple", "v": [1], "w": 2}, "unexpected keys ['w']"),
    ({"$ms": "tuple", "v": {"a": 1}}, "v must be a list"),
    ({"$ms": "set", "v": [1, 1]}, "equal items twice"),
    ({"$ms": "set", "v": [[1]]}, "tag 'set'"),  # a list is not hashable
    ({"$ms": "dict", "v": [[1, 2], [1, 3]]}, "repeats a key"),
    ({"$ms": "dict", "v": [[1]]}, "must be a [key, value] pair"),
    ({"$ms": "bytes", "v": "not base64!"}, "tag 'bytes'"),
    ({"$ms": "int", "v": "12"}, "hex integer"),
    ({"$ms": "float", "v": "NaN"}, "one of 'nan', 'inf', '-inf'"),
    ({"$ms": "datetime", "v": "yesterday"}, "tag 'datetime'"),
    ({"$ms": "datetime", "v": "2024-01-02T03:04:05+01:00"}, "without an offset"),
    ({"$ms": "datetime", "v": "2024-01-02", "zone": "Nowhere/Atlantis"}, "unknown time zone"),
    ({"$ms": "datetime", "v": "2024-01-02", "zone": "UTC", "offset": 0}, "exclude each other"),
    ({"$ms": "datetime", "v": "2024-01-02", "fold": 0}, "fold must be 1"),
    ({"$ms": "time", "v": "03:04", "offset": 86_400_000_000}, "tag 'time'"),
    ({"$ms": "timedelta", "v": [0, 86_400, 0]}, "normalised"),
    ({"$ms": "timedelta", "v": [10**10, 0, 0]}, "tag 'timedelta'"),
    ({"$ms": "decimal", "v": "one"}, "not a decimal number"),
    ({"$ms": "uuid", "v": "xyz"}, "tag 'uuid'"),
    ({"$ms": "date", "v": 20240102}, "v must be a str"),
]


@pytest.mark.parametrize(("raw", "message"), MALFORMED)
def test_E10_a_malformed_tag_is_a_record_error_naming_its_path(raw: Any, message: str) -> None:
    data = unstructure(_record(1))
    data["observations"][0]["output"] = {"rows": [0, raw]}
    with pytest.raises(RecordError) as info:
        structure(data, Execution)
    (problem,) = info.value.problems
    assert problem.startswith("observations[0].output: malformed stored value at rows[1]: ")
    assert message in problem
    data = unstructure(_record(1))
    data["plan"]["steps"][0]["input"] = {"$ms": "tuple", "v": []}
    with pytest.raises(RecordError, match=r"plan\.steps\[0\]\.input: .*must be an object"):
        structure(data, Execution)


def test_a_malformed_tag_in_one_agent_task_drops_that_record_only() -> None:
    task = ms.storage.AgentTaskRecord(
        id="ex-1:t1", agent_id="a", step_id="s", created_at=1, updated_at=1, execution_id="ex-1",
        inner_completed=("i",), inner_observations=(Observation(step_id="i", ok=True, output={1}),),
    )  # fmt: skip
    good = unstructure(task)
    bad = unstructure(task)
    bad["inner_observations"][0]["output"]["$ms"] = "sett"
    execution = Execution(id="ex-1", goal="g", agent_tasks=(good, bad), created_at=1, updated_at=1)
    records, dropped = ms.storage._seam.parse_agent_tasks(decode(encode(execution), Execution))
    assert dropped == 1  # E8: fail closed per record, never a guess
    assert records[0].inner_observations[0].output == {1}
