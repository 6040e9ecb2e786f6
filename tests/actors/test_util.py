"""The kernel's small helpers: how a class names its public home."""

from __future__ import annotations

from mainspring.actors._util import public_name


def test_a_class_not_exported_at_the_top_is_named_by_its_public_package() -> None:
    hidden = type("Hidden", (), {"__module__": "mainspring.supervision._ref"})
    assert public_name(hidden) == "mainspring.supervision.Hidden"
