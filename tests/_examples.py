"""How many examples a property test draws, by the Hypothesis profile the run loaded.

``tests/conftest.py`` registers two profiles and loads the one ``HYPOTHESIS_PROFILE`` names:

- ``quick`` (the default run): a quarter of the examples each property test asks for;
- ``thorough`` (``.ci/run``'s property-test step): every one of them.

A test asks with ``@settings(max_examples=examples(n))``; a test that does not pass
``max_examples`` draws the profile's own (25 quick, Hypothesis's 100 thorough). The properties
are the same under both profiles: only how many inputs each run tries changes.

A failure is shrunk under both profiles and explained (which parts of its example could vary)
only under ``thorough``: for whole records, explaining can take longer than shrinking, and it
has no time limit. Hypothesis stops shrinking after five minutes (not a setting); a property
test whose examples are slow to draw or to run (whole records, stores) is marked
``@pytest.mark.timeout(SHRINKING)``, so that on a loaded machine a failure it finds is
reported with its example: under the default 120 s the timeout would end the xdist worker
mid-shrink, and the run would show only "node down: Not properly terminated".
"""

from __future__ import annotations

from hypothesis import Phase, settings

#: the examples a test gets when it does not ask (Hypothesis's own default)
FULL = 100
#: the default run's phases: every one but explain
QUICK_PHASES = tuple(phase for phase in Phase if phase is not Phase.explain)
#: a per-test timeout (s) past Hypothesis's five minutes of shrinking, for the slow properties
SHRINKING = 420


def examples(asked: int) -> int:
    """``asked`` scaled by the loaded profile; never fewer than 10 (or ``asked``, if less)."""
    scaled = asked * settings.default.max_examples // FULL
    return max(scaled, min(asked, 10))
