"""Review of issue #14: ``store.close()`` closes *every* connection (its docstring), the
change feeds it handed out included; a feed of a closed store does not connect again."""

from __future__ import annotations

import secrets
import time

import psycopg

import mainspring as ms
from tests._postgres import postgres_url, server_url

__all__ = ["postgres_url"]  # a fixture


def _sessions(name: str) -> int:
    with psycopg.connect(server_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _settled(name: str, want: int) -> int:
    """The session count once it reaches ``want`` (a closed socket takes a moment to leave
    pg_stat_activity), or what it is after a generous deadline."""
    deadline = time.monotonic() + 10
    while (count := _sessions(name)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_D4_closing_the_store_closes_the_feeds_it_listened_with(postgres_url: str) -> None:
    name = f"rev14_feed_{secrets.token_hex(4)}"
    store = ms.storage.PostgresStore(f"{postgres_url}&application_name={name}")
    feeds = [store.listen(), store.listen()]
    try:
        assert _sessions(name) >= 3  # the pool's and one per feed
        store.close()
        assert _settled(name, 0) == 0, "store.close() left the feeds' sessions open"
    finally:
        for feed in feeds:
            feed.close()


def test_D4_a_feed_of_a_closed_store_does_not_connect_again(postgres_url: str) -> None:
    name = f"rev14_feed_{secrets.token_hex(4)}"
    store = ms.storage.PostgresStore(f"{postgres_url}&application_name={name}")
    feed = store.listen()
    try:
        with psycopg.connect(server_url(), autocommit=True) as conn:  # its session is ended
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
        store.close()
        assert _settled(name, 0) == 0
        feed.wait(0.2)  # notices the loss
        feed.wait(0.2)
        assert _sessions(name) == 0, "a feed of a closed store opened a new session"
    finally:
        feed.close()
