"""Every wait has a bound (global depth, per-model depth, maximum wait, concurrency
limit), a cancelled wait ends only itself, a start nobody waits for is cancelled only
when another model needs its room, and idle on-demand instances stop after their TTL."""

from __future__ import annotations

import math

from inferactors._errors import RefusalKind
from inferactors._policy import scheduler, scheduler_stops
from inferactors._policy.scheduler_state import Phase
from inferactors._stop_reasons import StopReason
from policy.scheduler_support import Driver, slot, state


def test_the_global_queue_depth_refuses_with_retry_after() -> None:
    run = Driver(state(slot("a"), slot("b"), max_queue=2, retry_after_s=3.0))
    run.request("a")
    run.request("b")
    third = run.request("a")
    refusal = run.refusal(third)
    assert refusal is not None
    assert refusal.kind is RefusalKind.QUEUE_FULL
    assert refusal.retry_after_s == 3.0
    assert refusal.waited_s is None
    assert scheduler.status_of(refusal.kind, refusal.retry_after_s) == 503
    assert run.starts("a") == 1  # the refused one changed nothing


def test_the_per_model_depth_leaves_other_models_room() -> None:
    run = Driver(state(slot("a"), slot("b"), max_queue_per_model=1))
    run.request("a")
    refusal = run.refusal(run.request("a"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.QUEUE_FULL
    assert "1 requests already wait for 'a'" in refusal.message
    other = run.request("b")
    assert run.refusal(other) is None


def test_a_grant_at_once_is_never_refused_for_depth() -> None:
    run = Driver(state(slot("a"), slot("b"), max_queue=1))
    run.running("a")
    run.request("b")  # waits: the queue is full
    for _ in range(5):
        assert run.granted(run.request("a"))


def test_the_concurrency_limit_counts_in_flight_and_waiting_and_answers_429() -> None:
    run = Driver(state(slot("a", limit=2)))
    first, second = run.request("a"), run.request("a")  # both join the start
    refusal = run.refusal(run.request("a"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.CONCURRENCY_LIMIT
    assert scheduler.status_of(refusal.kind, refusal.retry_after_s) == 429
    run.start_done("a")
    run.done(first)
    assert run.granted(run.request("a"))
    assert run.refused() == 1
    assert run.granted(second)


def test_a_wait_past_its_maximum_is_refused_and_nothing_else_moves() -> None:
    run = Driver(state(slot("a"), max_wait_s=10.0, retry_after_s=2.0))
    request = run.request("a")
    assert scheduler_stops.next_deadline(run.state) == 10.0
    run.tick(9.99)
    assert run.refusal(request) is None
    run.tick(10.0)
    refusal = run.refusal(request)
    assert refusal is not None
    assert refusal.kind is RefusalKind.WAIT_TIMEOUT
    assert refusal.retry_after_s == 2.0
    assert refusal.waited_s == 10.0
    assert "its start is still under way" in refusal.message
    assert run.state.queue == ()


def test_a_cancelled_wait_ends_only_itself() -> None:
    run = Driver(state(slot("a")))
    first, second = run.request("a"), run.request("a")
    run.cancel(first)
    run.start_done("a")
    assert run.granted(second)
    assert not run.granted(first)
    assert run.refusal(first) is None


def test_a_start_nobody_waits_for_goes_on_when_nobody_needs_its_room() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), budget_mb=1000))
    request = run.request("a")
    run.cancel(request)
    assert run.stops("a") == 0
    run.request("b")  # b fits beside a: nothing is cancelled
    assert run.stops("a") == 0
    run.start_done("a")
    assert run.state.slot("a").phase is Phase.RESIDENT


def test_a_start_nobody_waits_for_is_cancelled_when_another_model_needs_the_room() -> None:
    run = Driver(state(slot("a", 600), slot("b", 600), budget_mb=1000))
    request = run.request("a")
    run.cancel(request)
    run.request("b")
    assert run.stops("a", StopReason.EVICTED) == 1
    run.start_done("a")  # its start worker ends after the cancel: ignored
    assert run.state.slot("a").phase is Phase.STOPPING
    run.stopped("a")
    assert run.starts("b") == 1


def test_a_start_someone_waits_for_is_never_cancelled() -> None:
    run = Driver(state(slot("a", 600), slot("b", 600), budget_mb=1000))
    a = run.request("a")
    b = run.request("b")
    assert run.stops("a") == 0
    run.start_done("a")
    assert run.granted(a)
    assert not run.granted(b)


def test_idle_ttl_counts_from_the_end_of_the_last_request() -> None:
    run = Driver(state(slot("a", ttl=60.0)))
    first = run.request("a")
    run.start_done("a")
    run.now = 100.0
    run.done(first)
    assert scheduler_stops.ttl_left(run.state, "a", 100.0) == 60.0
    run.tick(159.9)
    assert run.stops("a") == 0
    run.tick(160.0)
    assert run.stops("a", StopReason.TTL) == 1
    run.stopped("a")
    assert run.state.slot("a").phase is Phase.NOT_LOADED


def test_no_ttl_while_in_flight_or_waited_for() -> None:
    run = Driver(state(slot("a", ttl=10.0), slot("b", swap="g", ttl=10.0), slot("c", swap="g")))
    busy = run.request("a")
    run.start_done("a")
    assert scheduler_stops.ttl_left(run.state, "a", 0.0) is None
    run.tick(1000.0)
    assert run.stops("a") == 0
    run.done(busy)
    assert scheduler_stops.ttl_left(run.state, "a", 1000.0) == 10.0
    run.running("b")
    held = run.request("b")
    run.request("c")  # waits for b to drain; b then counts no TTL (c waits)
    run.done(held)
    assert run.stops("b", StopReason.EVICTED) == 1
    assert run.stops("b", StopReason.TTL) == 0


def test_a_request_during_a_ttl_stop_starts_the_model_again() -> None:
    run = Driver(state(slot("a", ttl=5.0)))
    run.running("a")
    run.tick(5.0)
    assert run.stops("a", StopReason.TTL) == 1
    request = run.request("a")
    assert run.starts("a") == 0  # not while it is still stopping
    run.stopped("a")
    assert run.starts("a") == 1
    run.start_done("a")
    assert run.granted(request)


def test_an_infinite_ttl_never_stops_and_has_no_deadline() -> None:
    run = Driver(state(slot("a", ttl=math.inf)))
    run.running("a")
    assert scheduler_stops.next_deadline(run.state) == math.inf
    assert scheduler_stops.ttl_left(run.state, "a", 1e9) is None


def test_an_always_on_instance_is_never_stopped_for_idleness_nor_evicted() -> None:
    run = Driver(state(slot("a", 600, on_demand=False, ttl=1.0), slot("b", 600), budget_mb=1000))
    run.running("a")
    run.tick(100.0)
    assert run.stops("a") == 0
    refusal = run.refusal(run.request("b"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
