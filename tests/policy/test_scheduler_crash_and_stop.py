"""An on-demand instance that crashed is not restarted behind the ledger (its supervisor's
restart is cancelled by a stop, and the next request starts it through admission), and an
operator's stop of an on-demand instance lasts until an operator's start."""

from __future__ import annotations

import attrs

from inferactors._errors import RefusalKind
from inferactors._policy import scheduler
from inferactors._policy.residency import Bytes
from inferactors._policy.scheduler_state import Phase
from inferactors._stop_reasons import StopReason
from policy.scheduler_support import MB, Driver, slot, state


def _crash(run: Driver, name: str) -> None:
    run._apply(scheduler.on_crashed(run.state, name, run.now))


def test_a_crashed_on_demand_instance_is_stopped_so_its_supervisor_does_not_restart_it() -> None:
    run = Driver(state(slot("a", 600), slot("b", 600), budget_mb=1000))
    first = run.request("a")
    run.start_done("a")
    assert run.granted(first)
    _crash(run, "a")
    assert run.stops("a", StopReason.CRASH) == 1  # cancels the pending restart
    assert run.state.slot("a").phase is Phase.STOPPING
    run.done(first)
    run.stopped("a")
    assert run.state.slot("a").phase is Phase.NOT_LOADED
    assert run.state.slot("a").down is None  # a request may start it again


def test_after_a_crash_the_budget_holds_one_model_at_a_time() -> None:
    run = Driver(state(slot("a", 600), slot("b", 600), budget_mb=1000))
    first = run.request("a")
    run.start_done("a")
    run.done(first)
    _crash(run, "a")
    run.stopped("a")
    other = run.request("b")  # a's room went to b
    assert run.starts("b") == 1
    run.start_done("b")
    run.done(other)
    again = run.request("a")  # a comes back only through admission: b is evicted first
    assert run.stops("b", StopReason.EVICTED) == 1
    assert run.starts("a") == 1  # not yet: b still holds its room
    run.stopped("b")
    assert run.starts("a") == 2
    run.start_done("a")
    assert run.granted(again)
    resident = [s for s in run.state.slots if s.phase is Phase.RESIDENT]
    assert [s.name for s in resident] == ["a"]


def test_a_crash_of_an_always_on_instance_is_left_to_its_supervisor() -> None:
    run = Driver(state(slot("a", on_demand=False)))
    run.running("a")
    _crash(run, "a")
    assert run.stops("a") == 0
    assert run.state.slot("a").phase is Phase.NOT_LOADED


def test_an_operators_stop_of_an_on_demand_instance_lasts_until_a_start() -> None:
    run = Driver(state(slot("a")))
    first = run.request("a")
    run.start_done("a")
    run.done(first)
    run.stop("a", StopReason.REQUESTED)
    run.stopped("a")
    stopped = run.state.slot("a")
    assert stopped.operator_stopped  # a field, not the words: they are derived from it
    assert stopped.down is None
    assert stopped.down_words() == "stopped by an operator"
    refused = run.refusal(run.request("a"))
    assert refused is not None
    assert refused.kind is RefusalKind.STOPPING
    assert refused.retry_after_s is None  # not retryable: an operator must act
    assert "stopped by an operator" in refused.message
    assert "inferactors start a" in refused.message
    assert scheduler.status_of(refused.kind, refused.retry_after_s) == 503
    assert run.starts("a") == 1
    started = run.start("a")
    assert not run.state.slot("a").operator_stopped
    assert run.starts("a") == 2
    run.start_done("a")
    assert run.started(started)
    assert run.granted(run.request("a"))


def test_an_always_on_instance_down_in_the_same_words_is_no_on_demand_operators_stop() -> None:
    """The watcher says an always-on instance an operator stopped is down "stopped by an
    operator": that is its ``down``, refused as a failed start (its supervisor or a
    reload brings it back), never taken for an on-demand operator's stop."""
    run = Driver(state(slot("a", on_demand=False)))
    run.running("a")
    run._apply(scheduler.on_stopped(run.state, "a", run.now, "stopped by an operator"))
    assert not run.state.slot("a").operator_stopped
    refused = run.refusal(run.request("a"))
    assert refused is not None
    assert refused.kind is RefusalKind.START_FAILED
    assert "inferactors start" not in refused.message


def test_a_ttl_stop_or_an_eviction_is_no_operators_stop() -> None:
    run = Driver(state(slot("a", ttl=5.0)))
    first = run.request("a")
    run.start_done("a")
    run.done(first)
    run.tick(6.0)
    assert run.stops("a", StopReason.TTL) == 1
    run.stopped("a")
    later = run.request("a")
    assert run.refusal(later) is None
    assert run.starts("a") == 2


def test_a_reload_with_a_smaller_budget_evicts_idle_residents_least_recently_used_first() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), slot("c", 400), budget_mb=1300))
    for name in ("a", "b", "c"):
        run.now += 1.0
        first = run.request(name)
        run.start_done(name)
        run.done(first)
    busy = run.request("c")  # c is busy: never stopped for the budget
    assert run.granted(busy)
    old = run.state
    smaller = attrs.evolve(old.limits, budget=Bytes.of(500 * MB))
    run._apply(scheduler.on_rebind(old, old.slots, smaller, run.now))
    assert run.stops("a", StopReason.EVICTED) == 1  # least recently used
    assert run.stops("b", StopReason.EVICTED) == 1
    assert run.stops("c") == 0
    assert run.state.limits.budget.memory == 500 * MB


def test_a_reload_with_a_budget_that_still_fits_stops_nothing() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), budget_mb=1300))
    for name in ("a", "b"):
        first = run.request(name)
        run.start_done(name)
        run.done(first)
    old = run.state
    smaller = attrs.evolve(old.limits, budget=Bytes.of(800 * MB))
    run._apply(scheduler.on_rebind(old, old.slots, smaller, run.now))
    assert run.stops("a") == 0
    assert run.stops("b") == 0
