"""Only root may run a managed server as another user (`switch_refusal`): a supervisor that is
not root runs its servers as itself, and says so naming itself; root may run them as anyone
but root (`refuse_root`)."""

from __future__ import annotations

import pytest

from inferactors import InvalidConfig
from inferactors._policy.privilege import RunAs, refuse_root, switch_refusal

NOBODY = RunAs(65534, 65534, "nobody")
ALICE = RunAs(1000, 1000, "alice", (1000, 27))


def test_root_may_run_servers_as_any_user_but_root() -> None:
    assert switch_refusal(NOBODY, euid=0, user="root") is None
    assert switch_refusal(ALICE, euid=0, user="root") is None
    with pytest.raises(InvalidConfig, match="run_as must name a non-root user"):
        refuse_root(RunAs(0, 0, "root"))


def test_a_user_may_run_servers_as_itself() -> None:
    assert switch_refusal(ALICE, euid=1000, user="alice") is None


def test_a_user_may_not_run_servers_as_another_and_is_told_to_leave_run_as_out() -> None:
    assert switch_refusal(NOBODY, euid=1000, user="alice") == (
        "running servers as another user needs root; this supervisor runs as alice "
        "(uid 1000): leave run_as out to run them as alice"
    )
    assert switch_refusal(ALICE, euid=65534, user="nobody") == (
        "running servers as another user needs root; this supervisor runs as nobody "
        "(uid 65534): leave run_as out to run them as nobody"
    )
