"""Redaction: secrets are masked before anything reaches disk, events, logs or the CLI (E5).

Two nets: values registered as secrets (exact text, wherever it appears) and the shapes of
well-known credentials. Masks say what kind of secret was there, never any of its characters.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["PATTERNS", "redact", "register_secret"]

#: (kind, pattern). Order matters: more specific shapes first (``sk-ant-`` before ``sk-``).
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private-key",
        re.compile(
            # To its END line, or to the end of the text if it was cut off before it.
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r".*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
    ),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b")),
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b")),
    # Anthropic keys name their kind and version (sk-ant-api03-...). OpenAI's are either a
    # long unbroken run (legacy) or carry a kind (sk-proj-...): file names such as
    # "sk-2024-quarterly-report" or words such as "sk-learn-..." are neither.
    ("anthropic-key", re.compile(r"\bsk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{20,}")),
    (
        "openai-key",
        re.compile(r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})"),
    ),
    ("slack-token", re.compile(r"\bxox[abprse]-(?=[A-Za-z-]*[0-9])[A-Za-z0-9-]{10,}")),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{8,}")),
)
_BEARER = re.compile(
    r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?\s*bearer\s+)(?!\[redacted )[^\s\"',;]+"
)
_SECRET_KEYS = re.compile(
    r"(?i)^(?:password|passwd|pwd|secret|client_secret|secret_key|api[_-]?key|x-api-key|"
    r"access_key|aws_secret_access_key|token|access_token|refresh_token|id_token|auth_token|"
    r"session_token|authorization|proxy-authorization|cookie|set-cookie|private_key)$"
)
_MIN_SECRET = 6  # shorter registered values would mask ordinary words

_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(value: str) -> None:
    """Mask ``value`` wherever it appears from now on (process-wide). Needs 6+ characters."""
    if not isinstance(value, str) or len(value) < _MIN_SECRET:
        raise ValueError(f"a secret to register must be a string of {_MIN_SECRET}+ characters")
    with _lock:
        _registered.add(value)


def _mask(kind: str) -> str:
    return f"[redacted {kind}]"


def _redact_text(text: str, extra: frozenset[str]) -> str:
    secrets = _registered | extra if extra else _registered
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: no partial leaks
        if secret in text:
            text = text.replace(secret, _mask("secret"))
    for kind, pattern in PATTERNS:
        text = pattern.sub(_mask(kind), text)
    return _BEARER.sub(lambda m: m.group(1) + _mask("bearer-token"), text)


def redact(value: Any, *, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` with secrets masked, walking dicts, lists, tuples and attrs records.

    Strings are scanned for registered secrets, ``secrets`` given here, and known token shapes
    (AWS, GitHub, OpenAI, Anthropic, Slack, Google keys, JWTs, ``Authorization: Bearer`` values,
    PEM private keys). Values under keys named like ``password`` or ``api_key`` are masked
    whole. Other values are returned as they are.
    """
    extra = frozenset(s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET)
    return _walk(value, extra, 0)


def _walk(value: Any, extra: frozenset[str], depth: int) -> Any:
    if depth > 200:  # deeper than any record we write; refuse rather than recurse forever
        raise ValueError("value nested more than 200 levels deep")
    if isinstance(value, str):
        return _redact_text(value, extra)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key = _redact_text(key, extra) if isinstance(key, str) else key
            if new_key != key:  # masked keys must not collapse into one and lose entries
                base, n = new_key, 2
                while new_key in out or new_key in value:
                    new_key, n = f"{base} ({n})", n + 1
            if isinstance(key, str) and _SECRET_KEYS.match(key) and item not in (None, ""):
                out[new_key] = _mask("secret")
            else:
                out[new_key] = _walk(item, extra, depth + 1)
        return out
    if isinstance(value, list):
        return [_walk(item, extra, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(_walk(item, extra, depth + 1) for item in value)
    if attrs.has(type(value)):
        changes = {
            field.name: _walk(getattr(value, field.name), extra, depth + 1)
            for field in attrs.fields(type(value))
            if field.init
        }
        return attrs.evolve(value, **changes)
    return value
