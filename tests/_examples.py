"""How many examples a property test draws, by the Hypothesis profile the run loaded.

``tests/conftest.py`` registers two profiles and loads the one ``HYPOTHESIS_PROFILE`` names:

- ``quick`` (the default run): a quarter of the examples each property test asks for;
- ``thorough`` (``.ci/run``'s property-test step): every one of them.

A test asks with ``@settings(max_examples=examples(n))``; a test that does not pass
``max_examples`` draws the profile's own (25 quick, Hypothesis's 100 thorough). The properties
are the same under both profiles: only how many inputs each run tries changes.
"""

from __future__ import annotations

from hypothesis import settings

#: the examples a test gets when it does not ask (Hypothesis's own default)
FULL = 100


def examples(asked: int) -> int:
    """``asked`` scaled by the loaded profile; never fewer than 10 (or ``asked``, if less)."""
    scaled = asked * settings.default.max_examples // FULL
    return max(scaled, min(asked, 10))
