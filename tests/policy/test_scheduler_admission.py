"""Typed admission through the scheduler: fits now, fits after evicting idle instances
(least recently used first), must wait for busy ones, never fits (at once, not
retryable, naming the need, the budget and what blocks); groups, excludes, pins and
other programs' memory; the memory gate after an eviction."""

from __future__ import annotations

import attrs

from inferactors._errors import RefusalKind
from inferactors._policy.residency import Bytes, Footprint
from inferactors._policy.scheduler_effects import Drift, StartInstance, Trigger
from inferactors._policy.scheduler_state import Limits, Phase, SchedulerState
from inferactors._stop_reasons import StopReason
from policy.scheduler_support import MB, Driver, slot, state


def _start_effect(run: Driver, name: str) -> StartInstance:
    starts = [e for e in run.effects if isinstance(e, StartInstance) and e.name == name]
    assert starts, f"{name} was never started"
    return starts[-1]


def test_fits_now_starts_without_a_memory_gate() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), budget_mb=1000))
    run.running("a")
    run.request("b")
    start = _start_effect(run, "b")
    assert start.gate is None
    assert start.trigger is Trigger.REQUEST
    assert run.stops("a") == 0


def test_fits_after_evicting_the_least_recently_used_idle_instance() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), slot("c", 400), budget_mb=1000))
    run.running("a")
    run.now = 1.0
    run.running("b")
    run.now = 2.0
    b = run.request("b")
    run.done(b)  # b used at 2.0; a last used at 0.0
    run.request("c")
    assert run.stops("a", StopReason.EVICTED) == 1
    assert run.stops("b") == 0
    run.stopped("a")
    start = _start_effect(run, "c")
    assert start.gate == 400 * MB  # after an eviction: wait for the memory to be back


def test_an_idle_instance_goes_before_a_busy_older_one() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), slot("c", 400), budget_mb=1000))
    run.running("a")
    run.running("b")
    run.request("a")  # a busy (and used earlier than b is)
    run.request("c")
    assert run.stops("b", StopReason.EVICTED) == 1
    assert run.stops("a") == 0


def test_must_wait_for_busy_instances_reserves_them_against_newcomers() -> None:
    """No model starves behind another: once c waits for busy a, later requests for a
    are not granted ahead of c."""
    run = Driver(state(slot("a", 600), slot("c", 600), budget_mb=1000))
    run.running("a")
    busy = run.request("a")
    c = run.request("c")
    late = run.request("a")
    assert not run.granted(late)
    run.done(busy)
    assert run.stops("a", StopReason.EVICTED) == 1
    run.stopped("a")
    run.start_done("c")
    assert run.granted(c)
    assert not run.granted(late)  # it waits its turn: a starts again after c's request
    run.done(c)
    run.stopped("c")
    run.start_done("a")
    assert run.granted(late)


def test_never_fits_is_answered_at_once_naming_need_budget_and_pins() -> None:
    slots = [
        slot("embed", 300, persistent="keep"),
        slot("chat", 300, on_demand=False),
        slot("seen", 100, adopted=True),
        slot("big", 500),
    ]
    run = Driver(state(*slots, budget_mb=1000))
    for name in ("embed", "chat", "seen"):
        run.running(name)
    run.foreign(50 * MB)
    first, second = run.request("big"), run.request("big")
    for request in (first, second):
        refusal = run.refusal(request)
        assert refusal is not None
        assert refusal.kind is RefusalKind.NEVER_FITS
        assert refusal.retry_after_s is None
    message = run.refusal(first).message  # type: ignore[union-attr]
    assert message == (
        "unplaceable: 'big' needs 500.0 MB of memory but only 250.0 MB of the 1.0 GB memory "
        "budget can ever be free (held by 'embed' 300.0 MB (persistent), 'chat' 300.0 MB "
        "(always on), 'seen' 100.0 MB (adopted), other programs 50.0 MB)"
    )
    assert run.starts("big") == 0
    assert run.stops("embed") == 0


def test_a_model_larger_than_the_whole_budget_never_fits() -> None:
    run = Driver(state(slot("huge", 2000), budget_mb=1000))
    refusal = run.refusal(run.request("huge"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
    assert refusal.message == (
        "unplaceable: 'huge' needs 2.0 GB of memory but the whole memory budget is 1.0 GB"
    )


def test_a_persistent_member_is_evicted_only_by_its_own_swap_group() -> None:
    slots = [
        slot("p1", 600, swap="pair", persistent="pair"),
        slot("p2", 600, swap="pair", persistent="pair"),
        slot("other", 600),
    ]
    run = Driver(state(*slots, budget_mb=1000))
    run.running("p1")
    outsider = run.request("other")
    refusal = run.refusal(outsider)
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
    assert "'p1' 600.0 MB (persistent)" in refusal.message
    run.request("p2")
    assert run.stops("p1", StopReason.EVICTED) == 1


def test_a_swap_group_holds_one_member_even_when_both_would_fit() -> None:
    run = Driver(state(slot("a", 100, swap="g"), slot("b", 100, swap="g"), budget_mb=1000))
    run.running("a")
    run.request("b")
    assert run.stops("a", StopReason.EVICTED) == 1
    assert run.starts("b") == 0
    run.stopped("a")
    assert run.starts("b") == 1


def test_excludes_evicts_the_excluded_role_and_a_pinned_one_never_fits() -> None:
    run = Driver(
        state(
            slot("planner", 100, excludes=["role:coder"]),
            slot("coder", 100),
            slot("judge", 100, on_demand=False),
            slot("critic", 100, excludes=["judge"]),
            budget_mb=1000,
        )
    )
    run.running("coder")
    run.running("judge")
    run.request("planner")
    assert run.stops("coder", StopReason.EVICTED) == 1
    refusal = run.refusal(run.request("critic"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
    assert refusal.message == (
        "unplaceable: 'critic' cannot be resident beside 'judge' ('critic' excludes it; "
        "'judge' is always on)"
    )


def test_other_programs_memory_counts_as_resident_and_is_never_evicted() -> None:
    run = Driver(state(slot("a", 500), budget_mb=1000))
    run.foreign(600 * MB)
    refusal = run.refusal(run.request("a"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
    assert "other programs 600.0 MB" in refusal.message
    run.foreign(100 * MB)
    run.request("a")
    assert run.starts("a") == 1


def test_admission_uses_the_measured_figure_once_known() -> None:
    run = Driver(state(slot("a", 400), slot("b", 400), budget_mb=1000))
    run.running("a")
    run.footprint("a", Footprint(declared=400 * MB, measured_rss=700 * MB))
    run.request("b")
    assert run.stops("a", StopReason.EVICTED) == 1  # 700 measured + 400 > 1000


def test_the_measured_figure_replaces_the_estimate_but_never_the_declared_bytes() -> None:
    declared, estimated = 400 * MB, 300 * MB
    assert Footprint(declared, estimated).figure == 700 * MB
    assert Footprint(declared, estimated, measured_rss=500 * MB).figure == 500 * MB
    assert Footprint(declared, estimated, measured_rss=50 * MB).figure == declared
    assert Footprint(declared, estimated, measured_rss=450 * MB, engine=600 * MB).figure == (
        600 * MB
    )
    # the logged buffers alone leave the program out: they never lower the estimate
    assert Footprint(declared, estimated, engine=100 * MB).figure == 700 * MB
    assert Footprint(declared, estimated, engine=900 * MB).figure == 900 * MB


def test_a_first_drift_is_reported_once() -> None:
    run = Driver(state(slot("a", 400)))
    run.running("a")
    drifted = Footprint(declared=400 * MB, estimated=100 * MB, measured_rss=900 * MB)
    effects = run.footprint("a", drifted)
    drifts = [e for e in effects if isinstance(e, Drift)]
    assert len(drifts) == 1
    assert drifts[0].expected == 500 * MB
    assert drifts[0].measured == 900 * MB
    more = run.footprint("a", Footprint(declared=400 * MB, estimated=100 * MB, engine=950 * MB))
    assert not [e for e in more if isinstance(e, Drift)]


def test_an_accelerator_budget_is_admitted_apart_from_memory() -> None:
    gpu = (("gpu0", 8 * 1000 * MB),)
    big = attrs.evolve(slot("big", 100), footprint=Footprint(declared=100 * MB, devices=gpu))
    small = attrs.evolve(slot("small", 100), footprint=Footprint(declared=100 * MB, devices=gpu))
    limits = Limits(Bytes.of(1000 * MB, [("gpu0", 12 * 1000 * MB)]))
    run = Driver(SchedulerState.of(limits, (big, small)))
    run.running("big")
    run.request("small")  # memory fits; gpu0 does not: big is evicted
    assert run.stops("big", StopReason.EVICTED) == 1


def test_an_always_on_instance_is_never_started_by_a_request() -> None:
    run = Driver(state(slot("a", on_demand=False)))
    request = run.request("a")
    assert run.starts("a") == 0
    assert not run.granted(request)
    run.running("a")  # run (or its supervisor) started it
    assert run.granted(request)


def test_an_instance_still_loading_already_counts_and_is_never_evicted() -> None:
    run = Driver(state(slot("big", 600, on_demand=False), slot("b", 600), budget_mb=1000))
    run.loading("big")  # run started it; its model is loading
    assert run.state.slot("big").phase is Phase.STARTING
    waiting = run.request("big")
    refusal = run.refusal(run.request("b"))
    assert refusal is not None
    assert refusal.kind is RefusalKind.NEVER_FITS
    assert run.stops("big") == 0
    run.start_done("big")  # it serves now
    assert run.granted(waiting)


def test_an_always_on_instance_down_for_good_is_refused_at_once() -> None:
    run = Driver(state(slot("a", on_demand=False)))
    waiting = run.request("a")
    run.stopped("a", down="gave up: restart budget spent (5 of 5)")
    refusal = run.refusal(waiting)
    assert refusal is not None
    assert refusal.kind is RefusalKind.START_FAILED
    assert "gave up" in refusal.message
    assert refusal.retry_after_s is None
    later = run.refusal(run.request("a"))
    assert later is not None
    assert later.kind is RefusalKind.START_FAILED


def test_an_operators_start_is_admitted_like_a_request_and_answered_started() -> None:
    run = Driver(state(slot("a", 600), slot("b", 600), budget_mb=1000))
    run.running("a")
    start = run.start("b")
    assert run.stops("a", StopReason.EVICTED) == 1
    run.stopped("a")
    assert _start_effect(run, "b").trigger is Trigger.OPERATOR
    run.start_done("b")
    assert run.started(start)
    assert run.state.slot("b").phase is Phase.RESIDENT
    assert run.state.slot("b").in_flight == 0
