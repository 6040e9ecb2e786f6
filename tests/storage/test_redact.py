"""redact(): at least three positive and three negative samples per token shape (E5)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings

from mainspring.storage._redact import redact, redact_flagged, register_secret
from tests._examples import examples

from .._exact import same
from ..strategies import exact_values

# Made-up values of the right shape; none is a real credential.
POSITIVE = {
    "aws-access-key": [
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAY34FZKBOKMUTVV7A",
        "key=AKIA0123456789ABCDEF;",
    ],
    "github-token": [
        "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        "token gho_" + "Z" * 36,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    ],
    "anthropic-key": [
        "sk-ant-api03-" + "Ab3" * 12,
        "x sk-ant-admin01-" + "9" * 30,
        "sk-ant-api01-" + "q1" * 15,
    ],
    "openai-key": [
        "sk-" + "A1b2C3d4" * 6,
        "sk-proj-" + "z9Y8x7W6" * 5,
        "OPENAI_API_KEY=sk-" + "0" * 40,
    ],
    "slack-token": [
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
        "xoxp-1111111111-2222222222",
        "url?t=xoxa-2-abcdefghijkl",
    ],
    "google-api-key": [
        "AIza" + "SyA1" * 8 + "bcd",
        "key=AIza" + "0" * 35,
        "AIza" + "_-aB" * 8 + "xyz",
    ],
    "jwt": [
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Bearer-less eyJraWQiOiJr.eyJpc3MiOiJ4In0.abcdefghijk",
        "cookie=eyJ0eXAiOiJKV1Qi.eyJleHAiOjE3MDB9.S1gnature_value-xyz;",
    ],
    "bearer-token": [
        "Authorization: Bearer abc123.def456",
        "authorization=bearer opaque-token-value",
        '{"Authorization": "Bearer xyz789"}',
    ],
    "private-key": [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
        "pre -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n"
        "-----END OPENSSH PRIVATE KEY----- post",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg (cut off before its END line)",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
    ],
}

NEGATIVE = {
    "aws-access-key": ["AKIA123", "akiaiosfodnn7example", "XKIAIOSFODNN7EXAMPLE"],
    "github-token": ["ghp_short", "ghx_" + "a" * 36, "github_pat_short"],
    "anthropic-key": [
        "sk-ant-",
        "sk-ant-short1",
        "task-ant-" + "1" * 30,
        "sk-ant-eater-" + "x" * 30,
    ],
    "openai-key": [
        "sk-short1",
        "sk-learn-is-a-library-name",
        "sk-2024-quarterly-report-v2.csv",
        "risk-" + "1" * 30,
    ],
    "slack-token": ["xoxo-hugs-and-kisses", "xoxb-short", "xox-12345678901"],
    "google-api-key": ["AIza" + "0" * 10, "aiza" + "0" * 35, "AIzb" + "0" * 35],
    "jwt": ["eyJhbGciOiJIUzI1NiJ9", "a.b.c", "eyJ.eyJ.x"],
    "bearer-token": ["Bearer of bad news", "authorization required", "bearer bonds"],
    "private-key": [
        "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----",
        "BEGIN PRIVATE KEY without the armour",
    ],
}


@pytest.mark.parametrize(
    ("kind", "text"), [(k, t) for k, samples in POSITIVE.items() for t in samples]
)
def test_E5_known_token_shapes_are_masked(kind: str, text: str) -> None:
    out = redact(text)
    assert f"[redacted {kind}]" in out
    assert redact(out) == out  # masks are stable: redacting twice changes nothing


@pytest.mark.parametrize(
    ("kind", "text"), [(k, t) for k, samples in NEGATIVE.items() for t in samples]
)
def test_E5_lookalikes_are_left_alone(kind: str, text: str) -> None:
    assert redact(text) == text


def test_E5_registered_and_given_secrets_are_masked_everywhere() -> None:
    register_secret("hunter2-the-password")
    value = {
        "note": "login with hunter2-the-password please",
        "nested": [("tuple", "per-call-secret-xyz")],
        "hunter2-the-password": 1,
    }
    out = redact(value, secrets=["per-call-secret-xyz"])
    assert out == {
        "note": "login with [redacted secret] please",
        "nested": [("tuple", "[redacted secret]")],
        "[redacted secret]": 1,
    }
    with pytest.raises(ValueError, match="6"):
        register_secret("abc")


def test_E5_secret_named_keys_are_masked_and_other_values_kept() -> None:
    value = {"password": "pw", "api_key": "k", "calls_used": 3, "tokens_used": 7, "ok": True}
    assert redact(value) == {
        "password": "[redacted secret]",
        "api_key": "[redacted secret]",
        "calls_used": 3,
        "tokens_used": 7,
        "ok": True,
    }


def test_E5_attrs_records_are_redacted_field_by_field() -> None:
    @attrs.frozen
    class Note:
        text: str
        count: int

    assert redact(Note("key AKIAIOSFODNN7EXAMPLE", 2)) == Note("key [redacted aws-access-key]", 2)


def test_redact_refuses_absurd_nesting() -> None:
    deep: list[object] = []
    cursor = deep
    for _ in range(300):
        cursor.append([])
        cursor = cursor[0]  # type: ignore[assignment]
    with pytest.raises(ValueError, match="200 levels"):
        redact(deep)


def test_E5_masked_keys_never_collapse_and_more_key_names_are_masked() -> None:
    register_secret("alpha-secret-one")
    register_secret("beta-secret-two")
    out = redact({"alpha-secret-one": 1, "beta-secret-two": 2, "token": "t", "cookie": "c"})
    assert sorted(out.values(), key=str) == [1, 2, "[redacted secret]", "[redacted secret]"]
    assert len(out) == 4


# -- every container the typed encoding stores, and whether anything was masked (E10) -------

AWS = "AKIAIOSFODNN7EXAMPLE"


def test_E5_sets_frozensets_tuples_and_non_string_keys_are_walked() -> None:
    register_secret("gamma-secret-three")
    value = {
        "set": {f"key {AWS}", "plain"},
        "frozen": frozenset({"gamma-secret-three"}),
        "tuple": ("gamma-secret-three", 1),
        ("gamma-secret-three", 2): "tuple key",
        frozenset({AWS}): "frozenset key",
        3: {"nested": AWS},
    }
    out, changed = redact_flagged(value)
    assert changed
    assert out["set"] == {"key [redacted aws-access-key]", "plain"}
    assert out["frozen"] == frozenset({"[redacted secret]"})
    assert type(out["frozen"]) is frozenset
    assert out["tuple"] == ("[redacted secret]", 1)
    assert out[("[redacted secret]", 2)] == "tuple key"
    assert out[frozenset({"[redacted aws-access-key]"})] == "frozenset key"
    assert out[3] == {"nested": "[redacted aws-access-key]"}
    assert "gamma-secret-three" not in repr(out)
    assert AWS not in repr(out)


def test_E5_secrets_inside_bytes_are_masked_and_other_bytes_kept() -> None:
    register_secret("delta-secret-four")
    out, changed = redact_flagged(
        {"raw": b"\x00\xffpre delta-secret-four post", "id": AWS.encode()}
    )
    assert changed
    assert out["raw"] == b"\x00\xffpre [redacted secret] post"  # undecodable bytes kept
    assert out["id"] == b"[redacted aws-access-key]"
    binary = bytes(range(256))
    assert redact_flagged(binary) == (binary, False)


def test_E5_masked_non_string_keys_never_collapse() -> None:
    out = redact({(AWS, 1): "a", (AWS.replace("E", "F"), 1): "b"})
    assert sorted(out.values()) == ["a", "b"]
    assert AWS not in repr(out)


@given(value=exact_values)
@settings(max_examples=examples(200), deadline=None)
def test_E10_nothing_to_mask_is_reported_unchanged_nan_included(value: object) -> None:
    # The strategy holds only values redaction leaves alone (NaN keys and members too).
    out, changed = redact_flagged(value)
    assert not changed
    assert same(out, value)


def test_E10_the_flag_says_whether_anything_was_masked() -> None:
    nan = float("nan")
    assert redact_flagged({nan: nan, "x": [nan, (nan,)], "s": {nan}})[1] is False
    assert redact_flagged({"token": "[redacted secret]"})[1] is False  # already masked
    assert redact_flagged({"token": None})[1] is False
    assert redact_flagged({"token": "abc"}) == ({"token": "[redacted secret]"}, True)
    assert redact_flagged([f"see {AWS}"]) == (["see [redacted aws-access-key]"], True)
    assert redact_flagged({AWS: 1}) == ({"[redacted aws-access-key]": 1}, True)
    assert redact_flagged("Authorization: Bearer abc")[1] is True
    assert redact_flagged("fine", secrets=["not-in-it"]) == ("fine", False)
    assert redact_flagged("x my-given-secret", secrets=["my-given-secret"])[1] is True


PAGINATION = ["next_token", "page_token", "continuation_token", "nextPageToken", "pageToken",
              "next_page_token", "NextToken", "cursor", "tokens_used", "max_tokens",
              "input_tokens", "password_hint", "secret_santa", "token_count"]  # fmt: skip
SECRET_KEYS = ["token", "access_token", "refresh_token", "id_token", "api_key", "apiKey",
               "API-KEY", "password", "client_secret", "Authorization", "cookie",
               # the spellings config and HTTP code use every day (camelCase, env names)
               "accessToken", "clientSecret", "GITHUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD",
               "secretKey", "x-api-key", "bearer_token", "Set-Cookie", "csrf_token",
               "aws_secret_access_key"]  # fmt: skip


@pytest.mark.parametrize("key", PAGINATION)
def test_pagination_keys_are_not_secrets(key: str) -> None:
    page = {key: "eyJvZmZzZXQiOjEwMH0", "items": [1, 2]}
    assert redact_flagged(page) == (page, False)


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_E5_secret_keys_are_still_masked(key: str) -> None:
    assert redact_flagged({key: "opaque-value"}) == ({key: "[redacted secret]"}, True)


def test_E5_no_shape_matches_a_text_shorter_than_the_shortest_secret() -> None:
    # A text shorter than a registered secret may hold is returned unscanned: every shape
    # must need at least that many characters, or that shortcut would let one through.
    from re import _parser  # type: ignore[attr-defined]

    from mainspring.storage import _redact

    for _, pattern in (*_redact.PATTERNS, ("bearer", _redact._BEARER)):
        shortest = _parser.parse(pattern.pattern, pattern.flags).getwidth()[0]
        assert shortest >= _redact._MIN_SECRET, pattern.pattern


@pytest.mark.parametrize(
    "text", [t for samples in POSITIVE.values() for t in samples] + ["Authorization: Bearer abc"]
)
def test_E5_the_one_scan_for_every_shape_finds_each_shape(text: str) -> None:
    # The alternation of every shape is a pre-check: a text it passes is never scanned again.
    from mainspring.storage import _redact

    assert _redact._ANY_SHAPE.search(text) is not None
    assert redact(text) != text


def test_E5_a_secret_registered_later_is_masked_longest_first() -> None:
    register_secret("later-secret")
    register_secret("later-secret-and-longer")
    assert redact("x later-secret-and-longer y") == "x [redacted secret] y"
    assert redact("x later-secret y") == "x [redacted secret] y"
    assert redact({"k": ("later-secret",)}) == {"k": ("[redacted secret]",)}


def test_E5_redact_masks_a_secret_inside_a_vector_or_an_append_only_view() -> None:
    # A live record's plan steps, observations and tasks are Vectors and an agent's inner
    # steps AppendOnly views, both documented to read as the tuple they stand for; redact()
    # walks tuples, so a secret inside either must be masked (it is returned untouched).
    from mainspring.storage import Plan, PlanStep
    from mainspring.storage._seam import AppendOnly, Vector

    register_secret("vector-held-secret")
    assert redact(("x vector-held-secret",)) == ("x [redacted secret]",)
    masked, flagged = redact_flagged(Vector(["x vector-held-secret", "ok"]))
    assert flagged
    assert masked == ("x [redacted secret]", "ok")
    masked, flagged = redact_flagged(AppendOnly(["x vector-held-secret"]))
    assert flagged
    assert "vector-held-secret" not in repr(masked)
    step = PlanStep(id="a", tool="t", input={"query": "vector-held-secret"})
    plan = Plan(id="p", goal="g", steps=Vector([step]))
    assert "vector-held-secret" not in repr(redact(plan))
