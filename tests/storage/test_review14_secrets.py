"""Review of issue #14: a store URL's secrets never reach an error, a repr or the command's
output, whatever the URL looks like; a bad URL is a typed error, never a driver's crash."""

from __future__ import annotations

import contextlib
import io

import pytest

import mainspring as ms
from tests._cli_kit import run_cli
from tests._postgres import drop_schema, require_server

SECRET = "s3cretXY"


def _host() -> str:
    """The test server's host and port (a URL of our own is built around it)."""
    url = require_server()
    return url.split("@", 1)[1].split("/", 1)[0]


def _cli(*argv: str) -> tuple[int | str, str]:
    """Run the command; its exit code (or the exception it crashed with) and all it printed."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code, out = run_cli(*argv)
        except BaseException as exc:  # the command must not crash
            return f"crashed: {type(exc).__name__}: {exc}", err.getvalue()
    return code, out + err.getvalue()


def _opening(url: str) -> BaseException | None:
    """What opening a store at ``url`` raised (None if it opened: its schema is dropped)."""
    try:
        store = ms.storage.PostgresStore(url, connect_timeout=2)
    except Exception as exc:
        return exc
    store.close()
    drop_schema(store.schema)
    return None


def test_a_bad_percent_escape_in_the_password_never_reaches_the_error() -> None:
    """libpq's "invalid percent-encoded token" names the token, i.e. the password: the
    store's error must be a StorageError/ValueError without it (cause: _pg_connect._defaults
    calls psycopg's conninfo_to_dict unguarded)."""
    url = f"postgresql://postgres:{SECRET}%zz@{_host()}/test?schema=t_rev_secret"
    error = _opening(url)
    assert error is not None
    assert SECRET not in str(error)
    assert isinstance(error, ms.StorageError | ValueError), type(error)


def test_the_command_with_a_bad_percent_escape_exits_cleanly_without_the_password() -> None:
    url = f"postgresql://postgres:{SECRET}%zz@{_host()}/test?schema=t_rev_secret"
    code, printed = _cli("ls", "--store", url)
    assert isinstance(code, int), code
    assert code != 0
    assert SECRET not in printed
    assert SECRET not in str(code)


def test_an_unknown_url_parameter_is_a_typed_error_and_the_command_does_not_crash() -> None:
    url = f"postgresql://postgres@{_host()}/test?schema=t_rev_secret&bogus=1"
    error = _opening(url)
    assert error is not None
    assert isinstance(error, ms.StorageError | ValueError), type(error)
    code, _ = _cli("ls", "--store", url)
    assert isinstance(code, int), code
    assert code != 0


def test_sslpassword_is_masked_like_password() -> None:
    """``sslpassword`` (the client key's passphrase, a libpq parameter) is a secret too."""
    url = f"postgresql://postgres@127.0.0.1:1/test?schema=t_rev_secret&sslpassword={SECRET}"
    assert SECRET not in ms.storage._seam.redact_url(url)
    assert SECRET not in str(_opening(url))
    code, printed = _cli("ls", "--store", url)
    assert code != 0
    assert SECRET not in printed


@pytest.mark.parametrize("sep", ["/", "#", "?"])
def test_a_password_holding_a_url_delimiter_is_never_shown(sep: str) -> None:
    """A password with an unescaped ``/``, ``#`` or ``?`` (a user's mistake, but a common
    one) must still not be printed: the redaction splits on what urlsplit finds, which ends
    the user info early and shows the password's tail."""
    url = f"postgresql://postgres:pa{sep}{SECRET}@{_host()}/test?schema=t_rev_secret"
    assert SECRET not in ms.storage._seam.redact_url(url)
    assert SECRET not in str(_opening(url))
    code, printed = _cli("ls", "--store", url)
    assert SECRET not in printed
    assert SECRET not in str(code)
