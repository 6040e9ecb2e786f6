"""The text rule of redaction (E5): the shapes of well-known credentials and the secrets
registered in this process, masked wherever they appear in a string.

``mainspring.storage`` walks values with it (``storage._redact``: records, dicts, key names);
the command masks its usage errors with it without loading the stores. This module imports
nothing of mainspring, so every layer can use it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

__all__ = [
    "ANY_SHAPE",
    "BEARER",
    "MIN_SECRET",
    "NO_EXTRA",
    "PATTERNS",
    "SECRET_MASK",
    "Seen",
    "mask",
    "masked",
    "redact_text",
    "register",
]

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
BEARER = re.compile(
    r"(authorization[\"']?\s*[:=]\s*[\"']?\s*bearer\s+)(?!\[redacted )[^\s\"',;]+",
    re.IGNORECASE,
)


def _scoped(pattern: re.Pattern[str]) -> str:
    flags = "".join(
        letter for flag, letter in ((re.DOTALL, "s"), (re.IGNORECASE, "i")) if pattern.flags & flag
    )
    return f"(?{flags}:{pattern.pattern})" if flags else f"(?:{pattern.pattern})"


#: Every shape above and the bearer rule in one alternation: it matches somewhere in a text
#: exactly when one of them does, so a text it does not match (nearly every one) is scanned
#: once instead of once per shape (E5 unchanged: a text it matches is scanned shape by shape).
ANY_SHAPE = re.compile("|".join(_scoped(p) for p in (*(p for _, p in PATTERNS), BEARER)))


#: Shorter registered values would mask ordinary words. Every shape above is longer too
#: (tests/storage/test_redact.py checks it), so a shorter text can hold no secret at all.
MIN_SECRET = 6

_lock = threading.Lock()
_registered: set[str] = set()
#: The registered secrets, longest first (no partial leaks), sorted once per registration.
_longest_first: tuple[str, ...] = ()
NO_EXTRA: frozenset[str] = frozenset()


def register(value: str) -> None:
    """Mask ``value`` wherever it appears from now on, process-wide (what
    ``mainspring.storage.register_secret`` does). Needs 6+ characters."""
    global _longest_first
    if not isinstance(value, str) or len(value) < MIN_SECRET:
        raise ValueError(f"a secret to register must be a string of {MIN_SECRET}+ characters")
    with _lock:
        _registered.add(value)
        _longest_first = tuple(sorted(_registered, key=len, reverse=True))


def mask(kind: str) -> str:
    return f"[redacted {kind}]"


SECRET_MASK = mask("secret")


class Seen:
    """Whether a redaction masked anything: set by :func:`redact_text`, never cleared."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False


def redact_text(text: str, extra: frozenset[str], changed: Seen) -> str:
    """``text`` with the registered secrets, those in ``extra`` and every shape masked;
    ``changed.seen`` set if anything was."""
    if len(text) < MIN_SECRET:  # shorter than any secret and any shape: nothing to mask
        return text
    if extra:
        secrets: Iterable[str] = sorted(_registered | extra, key=len, reverse=True)
    else:
        secrets = _longest_first
    for secret in secrets:  # longest first: no partial leaks
        if secret in text:
            text = text.replace(secret, SECRET_MASK)
            changed.seen = True
    if ANY_SHAPE.search(text) is None:
        return text
    for kind, pattern in PATTERNS:
        text, count = pattern.subn(mask(kind), text)
        if count:
            changed.seen = True
    text, count = BEARER.subn(lambda m: m.group(1) + mask("bearer-token"), text)
    if count:
        changed.seen = True
    return text


def masked(text: str) -> str:
    """``text`` redacted as ``mainspring.storage.redact`` redacts a string."""
    return redact_text(text, NO_EXTRA, Seen())
