"""Review of issue #16 (agent memory): ``mainspring memory forget`` of an organization's fact
needs that organization (``--organization``), as ``ls`` and ``search`` need it to show the
fact: without it (or with another) the command says so, exits 3 and changes nothing. Before,
the store's raw read found the fact and the runtime's forget then refused it, or deleted it
for any organization."""

from __future__ import annotations

import json

import pytest

from mainspring.cli import EXIT_OK, EXIT_UNKNOWN

from ._cli_kit import run_cli
from .test_cli_memory import _json, _seed, _snapshot, store

__all__ = ["store"]


@pytest.mark.parametrize("organization", [[], ["--organization", "globex"]])
def test_forgetting_an_organizations_fact_needs_that_organization(
    store: str, organization: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = _seed(store)
    capsys.readouterr()
    before = _snapshot(store)
    code, _ = run_cli("memory", "forget", ids["style"], *organization, "--json", "--store", store)
    assert code == EXIT_UNKNOWN
    error = json.loads(capsys.readouterr().err)["error"]
    assert "--organization" in error
    assert _snapshot(store) == before
    code, out = run_cli(
        "memory", "forget", ids["style"], "--organization", "acme", "--store", store
    )
    assert (code, out) == (EXIT_OK, f"{ids['style']}: forgotten\n")
    org = _json("memory", "ls", "--all", "--organization", "acme", "--store", store)
    assert ids["style"] not in [fact["id"] for fact in org]
