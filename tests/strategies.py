"""Hypothesis strategies shared by the property tests (STYLE.md, habit 13)."""

from __future__ import annotations

from hypothesis import strategies as st

import mainspring as ms

details = st.text(max_size=40)
paths = st.lists(st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True), min_size=1, max_size=4).map(
    lambda names: "/" + "/".join(names)
)

_leaf_reasons = st.one_of(
    st.builds(ms.Stop, detail=details),
    st.builds(ms.Pause, detail=details),
    st.builds(ms.Cancel, detail=details, source=st.sampled_from(["", "user", "system"])),
    st.builds(ms.Shutdown, detail=details),
    st.builds(ms.Timeout, detail=details),
    st.builds(ms.BudgetExhausted, detail=details),
    st.builds(ms.Crash, st.text(min_size=1, max_size=30), detail=details),
    st.builds(ms.LeaseLost, st.text(max_size=30), detail=details),
)

#: A leaf reason wrapped in 0..6 ParentCancel links.
reasons = st.recursive(
    _leaf_reasons,
    lambda inner: st.builds(ms.ParentCancel, inner, source=paths),
    max_leaves=6,
)

#: Per-sender message counts and a mailbox size, for the FIFO property.
sender_plans = st.tuples(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=8),
)

#: Restart types and supervisor strategies, for the supervision model test.
restart_types = st.sampled_from(["permanent", "transient", "temporary"])
strategies = st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"])
