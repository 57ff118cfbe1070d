"""llama-swap's fifo_test.go cases, ported to the pure front door scheduler: fast path,
on-demand start, join, a failed start, eviction collisions, disjoint starts, collation, no
swap while serving, a grant to a gone caller, shutdown and an operator's stop."""

from __future__ import annotations

from inferactors._errors import RefusalKind
from inferactors._policy.scheduler_state import Phase, StartFailure
from inferactors._stop_reasons import StopReason
from policy.scheduler_support import Driver, slot, state


def test_fast_path_grants_a_resident_model_without_a_start() -> None:
    run = Driver(state(slot("a")))
    run.running("a")
    request = run.request("a")
    assert run.granted(request)
    assert run.starts("a") == 0
    assert run.state.slot("a").in_flight == 1


def test_an_unknown_model_is_refused_naming_the_models_that_exist() -> None:
    run = Driver(state(slot("a"), slot("b")))
    request = run.request("ghost")
    refusal = run.refusal(request)
    assert refusal is not None
    assert refusal.kind is RefusalKind.UNKNOWN_MODEL
    assert "'ghost'" in refusal.message
    assert '"a", "b"' in refusal.message
    assert run.starts("a") == run.starts("b") == 0


def test_an_unknown_model_named_by_megabytes_is_cut_in_the_refusal() -> None:
    run = Driver(state(slot("a")))
    refusal = run.refusal(run.request("x" * 5_000_000))
    assert refusal is not None
    assert len(refusal.message) < 400
    assert "(5000000 characters)" in refusal.message


def test_an_alias_routes_to_its_instance() -> None:
    run = Driver(state(slot("a", aliases=["tiny-model"])))
    request = run.request("tiny-model")
    assert run.starts("a") == 1
    run.start_done("a")
    assert run.granted(request)


def test_on_demand_start_then_serve() -> None:
    run = Driver(state(slot("a")))
    request = run.request("a")
    assert run.starts("a") == 1
    assert not run.granted(request)
    run.start_done("a")
    assert run.granted(request)


def test_requests_join_the_one_start_under_way() -> None:
    run = Driver(state(slot("a")))
    requests = [run.request("a") for _ in range(3)]
    assert run.starts("a") == 1
    run.start_done("a")
    assert all(run.granted(r) for r in requests)
    assert run.starts("a") == 1


def test_a_failed_start_refuses_every_waiter_in_the_servers_words() -> None:
    run = Driver(state(slot("a")))
    first, second = run.request("a"), run.request("a")
    why = "invalid flag: error: invalid argument: --bogus"
    run.start_done("a", StartFailure(RefusalKind.START_FAILED, why))
    for request in (first, second):
        refusal = run.refusal(request)
        assert refusal is not None
        assert refusal.kind is RefusalKind.START_FAILED
        assert refusal.message == why
    assert run.state.slot("a").phase is Phase.NOT_LOADED
    assert run.served("a") == 0


def test_a_start_that_evicts_a_starting_model_waits_for_it_to_drain() -> None:
    """Collision: b evicts a (one swap group) while a starts; b waits until a's start
    ends AND its request is served, then a is stopped and b started."""
    run = Driver(state(slot("a", swap="g"), slot("b", swap="g")))
    a = run.request("a")
    b = run.request("b")
    assert run.starts("b") == 0
    run.start_done("a")
    assert run.granted(a)
    assert run.stops("a") == 0
    assert run.starts("b") == 0
    run.done(a)
    assert run.stops("a", StopReason.EVICTED) == 1
    assert run.starts("b") == 0  # not before a's memory is back
    run.stopped("a")
    assert run.starts("b") == 1
    run.start_done("b")
    assert run.granted(b)


def test_disjoint_starts_run_in_parallel() -> None:
    run = Driver(state(slot("a"), slot("b")))
    run.request("a")
    run.request("b")
    assert run.starts("a") == run.starts("b") == 1


def test_two_targets_never_count_on_one_eviction() -> None:
    """a and b each need x's room: a evicts x; b does not count on x's room too, and
    starts only once there is room for it beside a."""
    run = Driver(state(slot("x", 600), slot("a", 500), slot("b", 500), budget_mb=1000))
    run.running("x")
    run.request("a")
    assert run.stops("x", StopReason.EVICTED) == 1
    run.request("b")
    assert run.starts("a") == 0
    assert run.starts("b") == 0
    run.stopped("x")
    assert run.starts("a") == 1
    assert run.starts("b") == 1


def test_overlapping_evictions_do_not_run_in_parallel() -> None:
    run = Driver(state(slot("x", 600), slot("a", 700), slot("b", 700), budget_mb=1000))
    run.running("x")
    a = run.request("a")
    run.request("b")
    assert run.stops("x") == 1
    assert run.starts("a") == 0
    assert run.starts("b") == 0
    run.stopped("x")
    assert run.starts("a") == 1
    assert run.starts("b") == 0
    run.start_done("a")
    assert run.granted(a)
    run.done(a)
    assert run.stops("a", StopReason.EVICTED) == 1
    run.stopped("a")
    assert run.starts("b") == 1


def test_one_start_promotes_every_waiter_it_unblocks() -> None:
    run = Driver(state(slot("a", 1000), slot("b", 500), slot("c", 500), budget_mb=1000))
    run.running("b")
    run.running("c")
    b_busy = run.request("b")
    a = run.request("a")  # must wait for b (busy) and c (reserved with it)
    b = run.request("b")  # b is reserved for a: waits behind it
    c = run.request("c")
    assert not run.granted(b)
    assert not run.granted(c)
    run.done(b_busy)
    assert run.stops("b", StopReason.EVICTED) == 1
    assert run.stops("c", StopReason.EVICTED) == 1
    run.stopped("b")
    run.stopped("c")
    assert run.starts("a") == 1
    run.start_done("a")
    assert run.granted(a)
    run.done(a)
    run.stopped("a")  # evicted for b and c: both start together
    assert run.starts("b") == 1
    assert run.starts("c") == 1


def test_collation_serves_each_model_once_in_arrival_batches() -> None:
    """a b c a b c, each excluding the others: every model starts once and serves its
    two requests (the second joined the start under way)."""
    slots = [slot(name, swap="g") for name in "abc"]
    run = Driver(state(*slots))
    requests = {name: [] for name in "abc"}  # type: dict[str, list[int]]
    for name in "abcabc":
        requests[name].append(run.request(name))
    for name in "abc":
        run.start_done(name)
        assert run.grants_of(name) == requests[name]
        for request in requests[name]:
            run.done(request)
        run.stopped(name)
    for name in "abc":
        assert run.starts(name) == 1
        assert run.served(name) == 2


def test_no_swap_while_serving() -> None:
    run = Driver(state(slot("a", swap="g"), slot("b", swap="g")))
    run.running("a")
    first, second = run.request("a"), run.request("a")
    run.request("b")
    assert run.starts("b") == 0
    assert run.stops("a") == 0
    run.done(first)
    assert run.stops("a") == 0
    run.done(second)
    assert run.stops("a", StopReason.EVICTED) == 1
    run.stopped("a")
    assert run.starts("b") == 1


def test_a_grant_to_a_gone_caller_does_not_leak_in_flight() -> None:
    run = Driver(state(slot("a", swap="g"), slot("b", swap="g")))
    a = run.request("a")
    run.start_done("a")
    assert run.granted(a)
    run.done(a, served=False)  # the caller was gone when the grant came
    assert run.state.slot("a").in_flight == 0
    run.request("b")
    assert run.stops("a", StopReason.EVICTED) == 1


def test_a_second_done_does_nothing() -> None:
    run = Driver(state(slot("a")))
    run.running("a")
    first, second = run.request("a"), run.request("a")
    run.done(first)
    run.done(first)
    assert run.state.slot("a").in_flight == 1
    run.done(second)
    assert run.state.slot("a").in_flight == 0


def test_shutdown_refuses_every_waiter_and_every_later_request() -> None:
    run = Driver(state(slot("a", swap="g"), slot("b", swap="g"), slot("c", swap="g")))
    waiting = [run.request(n) for n in "aabbc"]
    run.shutdown()
    assert all(run.refusal(r) is not None for r in waiting)
    assert run.refused(RefusalKind.STOPPING) == 5
    later = run.request("a")
    refusal = run.refusal(later)
    assert refusal is not None
    assert refusal.kind is RefusalKind.STOPPING


def test_shutdown_drains_in_flight_then_stops() -> None:
    run = Driver(state(slot("a"), slot("b")))
    run.running("a")
    run.running("b")
    busy = run.request("a")
    run.shutdown()
    assert run.stops("b", StopReason.SHUTDOWN) == 1
    assert run.stops("a") == 0
    assert run.state.slot("a").phase is Phase.DRAINING
    run.done(busy)
    assert run.stops("a", StopReason.SHUTDOWN) == 1


def test_an_operators_stop_refuses_the_waiters_and_drains() -> None:
    run = Driver(state(slot("a", swap="g"), slot("b", swap="g")))
    run.running("a")
    busy = run.request("a")
    waiting = run.request("b")
    run.stop("b")  # not loaded: nothing to stop, and its waiter stays
    assert run.refusal(waiting) is None
    run.stop("a")
    assert run.state.slot("a").phase is Phase.DRAINING
    assert run.stops("a") == 0
    run.done(busy)
    assert run.stops("a", StopReason.REQUESTED) == 1
    run.stopped("a")
    assert run.starts("b") == 1


def test_a_request_during_an_operators_stop_is_refused_not_queued() -> None:
    run = Driver(state(slot("a")))
    run.running("a")
    busy = run.request("a")
    run.stop("a")
    refusal = run.refusal(run.request("a"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.STOPPING
    assert refusal.retry_after_s is not None
    run.done(busy)
    run.stopped("a")
    later = run.refusal(run.request("a"))  # an operator's stop holds once it is down
    assert later is not None
    assert "stopped by an operator" in later.message
    assert run.starts("a") == 0
    run.start("a")  # until an operator's start
    assert run.starts("a") == 1


def test_a_drain_that_times_out_stops_anyway() -> None:
    run = Driver(state(slot("a"), drain_timeout_s=5.0))
    run.running("a")
    run.request("a")
    run.stop("a", StopReason.RELOAD)
    run.tick(4.9)
    assert run.stops("a") == 0
    run.tick(5.0)
    assert run.stops("a", StopReason.RELOAD) == 1
