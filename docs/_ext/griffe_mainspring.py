"""How the API reference reads mainspring's docstrings (a griffe extension, docs build only).

- Each public namespace's members are the names its ``__all__`` lists at run time (the top
  level computes its ``__all__``, which static analysis cannot evaluate).
- The docstrings' Sphinx roles (``:class:`Store```) become code spans.
- An invariant id that the legend explains (``E7``, ``V2``...) becomes a link to it.
- A public function made by a decorator at import time (``open_system``) has the docstring
  it has at run time.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import griffe

#: The ids the legend explains: each a heading of docs/explanation/invariants.md with that id.
LEGEND = frozenset(
    re.findall(
        r"\{ #([A-Z]\d{1,2}) \}",
        (Path(__file__).resolve().parent.parent / "explanation" / "invariants.md").read_text(),
    )
)

_ROLE = re.compile(r":(?:class|func|meth|attr|data|exc|mod|obj):`(~?)([^`]+)`")
# An id on its own: not part of a longer word, a name (``all-MiniLM-L6-v2``) or a path.
_ID = re.compile(r"(?<![\w./-])([A-Z]\d{1,2})(?![\w/-])")
_CODE = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)


def _link_ids(text: str) -> str:
    def link(match: re.Match[str]) -> str:
        code = match.group(1)
        return f"[{code}][{code}]" if code in LEGEND else code

    out: list[str] = []
    last = 0
    for span in _CODE.finditer(text):  # never inside a code span
        out.append(_ID.sub(link, text[last : span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_ID.sub(link, text[last:]))
    return "".join(out)


def rewrite(text: str) -> str:
    """A docstring as the reference shows it."""

    def code(match: re.Match[str]) -> str:
        name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"`{name}`"

    return _link_ids(_ROLE.sub(code, text))


def _public(path: str) -> bool:
    return not any(part.startswith("_") for part in path.split("."))


class MainspringDocs(griffe.Extension):
    """Exports from ``__all__`` at run time; docstrings rewritten (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "mainspring":
            return
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
        if isinstance(obj, griffe.Module) and _public(obj.path):
            module = importlib.import_module(obj.path)
            names = getattr(module, "__all__", None)
            if names is not None:
                obj.exports = list(names)
            for name, member in obj.members.items():
                value = getattr(module, name, None)
                # Exported from a private module (``open_system`` from ``_public``), the
                # member is an alias: the attribute it names is what the reference shows.
                try:
                    target = member.final_target if member.is_alias else member
                except griffe.AliasResolutionError:  # outside mainspring (``__future__``)
                    continue
                if isinstance(target, griffe.Attribute) and inspect.isfunction(value):
                    doc = inspect.getdoc(value)
                    if doc and target.docstring is None:
                        target.docstring = griffe.Docstring(rewrite(doc), parent=target)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]
