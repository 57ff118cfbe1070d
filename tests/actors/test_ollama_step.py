"""The managed Ollama actor's state machine (``_actors/ollama/step.py``), synchronous and pure.

Every message in every reachable state keeps the actor's contract (each caller answered
exactly once, now, by the worker handed the reply, or when the unload under way ends;
nobody dropped); the rules that matter most have a case each (one unload per load of ours,
never someone else's model, a result of an earlier attempt dropped, a crash stopping as a
stop would); and a hypothesis world that sends only what a real one could checks that no
sequence breaks them. Stand-in replies and `LoadedModel` values; no trio, no daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from inferactors import BackendError, InstanceState, InvalidState, RunEvidence, UnknownInstance
from inferactors._actors.mailbox import Crash, Crashed
from inferactors._actors.messages import (
    Annotate,
    DeepHealth,
    GetHealth,
    GetStatus,
    InstanceCommand,
    ReplyTo,
    Restart,
    Shutdown,
    Start,
    Stop,
)
from inferactors._actors.ollama.effects import (
    Answer,
    Check,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    Effect,
    EndWatch,
    NoteProbeTime,
    Refuse,
    StartLoad,
    SurveyFor,
    Unload,
)
from inferactors._actors.ollama.messages import (
    Checked,
    Closed,
    Loaded,
    Survey,
    Surveyed,
    Unloaded,
    Watched,
)
from inferactors._actors.ollama.state import OllamaState, Owner, Phase
from inferactors._actors.ollama.status import ollama_status
from inferactors._actors.ollama.step import Message, Seen, step
from inferactors._policy.ollama_parse import LoadedModel
from inferactors._policy.probe_report import Up

TAG = "qwen2.5:0.5b"
EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)
ENTRY = LoadedModel(TAG, TAG, expires_at=EXPIRES)
CRASH = Crash("ValueError", "boom", "its loop, handling Watched")
COMMANDS = (Start, Restart, Stop, GetStatus, GetHealth, DeepHealth, Annotate, Shutdown)


@attrs.define(eq=False)
class Caller:
    name: str


def caller(name: str) -> ReplyTo[Any]:
    return cast("ReplyTo[Any]", Caller(name))


@attrs.define
class Run:
    state: OllamaState = attrs.Factory(lambda: OllamaState("ollama-1", "rt", TAG))
    effects: list[Effect] = attrs.Factory(list)

    def send(self, message: Message, answered: bool = False) -> tuple[Effect, ...]:
        self.state, out = step(self.state, message, 5.0, Seen(load_answered=answered))
        self.effects += out
        return out


def _checking(run: Run) -> None:
    run.send(Start(caller("start")))


def _loading(run: Run) -> None:
    _checking(run)
    run.send(Checked(run.state.attempt, None))


def _ours(run: Run) -> None:
    _loading(run)
    run.send(Loaded(run.state.attempt, ENTRY), answered=True)


def _theirs(run: Run) -> None:
    _checking(run)
    run.send(Checked(run.state.attempt, ENTRY))


def _failed(run: Run) -> None:
    _loading(run)
    run.send(Loaded(run.state.attempt, None, BackendError("out of memory")))


def _stopping(run: Run) -> None:
    _ours(run)
    run.send(Stop(2.0, caller("stop")))


def _lingering(run: Run) -> None:
    _stopping(run)
    run.send(Unloaded(False, 2.0))


def _closing(run: Run) -> None:
    _ours(run)
    run.send(Shutdown(5.0, caller("unload")))


STATES: dict[str, Callable[[Run], None]] = {
    "idle": lambda run: None,
    "checking": _checking,
    "loading": _loading,
    "ready, ours": _ours,
    "ready, theirs": _theirs,
    "failed": _failed,
    "stopping": _stopping,
    "stopped, lingering": _lingering,
    "closing": _closing,
}


def reach(name: str) -> Run:
    run = Run()
    STATES[name](run)
    return run


def messages(run: Run) -> dict[str, Message]:
    now, old = run.state.attempt, run.state.attempt - 1
    return {
        "Start": Start(caller("start2")),
        "Restart": Restart(1, caller("restart")),
        "Stop": Stop(1.0, caller("stop2")),
        "GetStatus": GetStatus(caller("status")),
        "GetHealth": GetHealth(caller("health")),
        "DeepHealth": DeepHealth(caller("deep")),
        "Annotate": Annotate(None, 0, caller("note")),
        "Shutdown": Shutdown(5.0, caller("unload2")),
        "Checked, absent": Checked(now, None),
        "Checked, resident": Checked(now, ENTRY),
        "Checked, cloud": Checked(now, None, cloud="ollama.com:443"),
        "Checked, stale": Checked(old, None),
        "Loaded": Loaded(now, ENTRY),
        "Loaded, failed": Loaded(now, None, BackendError("boom")),
        "Loaded, stale": Loaded(old, ENTRY),
        "Watched, gone": Watched(now, ()),
        "Surveyed": Surveyed(Survey(Up(), (TAG,), (ENTRY,), "0.6.0"), caller("survey")),
        "Unloaded": Unloaded(True, 2.0),
        "Unloaded, lingering": Unloaded(False, 2.0),
        "Unloaded, failed": Unloaded(False, 2.0, BackendError("refused")),
        "Closed": Closed(caller("closed")),
        "Crashed": Crashed(CRASH),
    }


PAIRS = [(state, name) for state in STATES for name in messages(reach(state))]


def of_answers(out: tuple[Effect, ...]) -> list[Answer]:
    return [effect for effect in out if isinstance(effect, Answer)]


def told(out: tuple[Effect, ...]) -> list[Any]:
    return [e.reply for e in out if isinstance(e, Answer | Refuse)]


def handed(out: tuple[Effect, ...]) -> list[Any]:
    kinds = SurveyFor | CheckHealth | CheckDeepHealth | CloseDown
    return [e.reply for e in out if isinstance(e, kinds)]


@pytest.mark.parametrize(("state", "name"), PAIRS)
@pytest.mark.parametrize("answered", [False, True])
def test_the_contract_holds_for_every_message_in_every_state(
    state: str, name: str, answered: bool
) -> None:
    run = reach(state)
    before = run.state
    message = messages(run)[name]
    out = run.send(message, answered=answered)
    after = run.state
    now = told(out)
    assert len(now) == len({id(reply) for reply in now})
    if isinstance(message, COMMANDS):
        later = any(r is message.reply for r in after.stop_callers)
        assert any(r is message.reply for r in now + handed(out)) or later
        assert not (any(r is message.reply for r in now) and later)
    for waiting in before.stop_callers:
        assert any(r is waiting for r in (*after.stop_callers, *now))
    unloads = [e for e in out if isinstance(e, Unload | CloseDown) and getattr(e, "owed", True)]
    if unloads:  # one unload per load of ours, never of someone else's model
        assert before.unload_owed or (before.loading and answered)
        assert not after.unload_owed
    ollama_status(after)  # never raises


def test_each_named_state_is_what_it_says() -> None:
    assert reach("checking").state.phase is Phase.CHECKING
    assert reach("loading").state.loading
    ours = reach("ready, ours").state
    assert (ours.phase, ours.owner, ours.unload_owed) == (Phase.READY, Owner.OURS, True)
    theirs = reach("ready, theirs").state
    assert (theirs.owner, theirs.unload_owed) == (Owner.THEIRS, False)
    assert reach("failed").state.phase is Phase.FAILED
    assert reach("stopping").state.stop_callers
    assert reach("stopped, lingering").state.lingering is not None
    assert reach("closing").state.closing


def test_a_model_someone_else_loaded_is_never_unloaded() -> None:
    run = reach("ready, theirs")
    out = run.send(Stop(2.0, caller("stop")))
    assert [type(e) for e in out] == [EndWatch, Answer]  # its watch ends; nothing is sent
    assert ollama_status(run.state).detail == (
        "stopped; the model stays resident (loaded by someone else)"
    )


def test_a_load_ollama_answered_owes_its_unload_even_if_stopped_before_it_returned() -> None:
    run = reach("loading")
    out = run.send(Stop(2.0, caller("stop")), answered=True)
    assert Unload(2.0) in out
    assert run.state.phase is Phase.STOPPING
    run = reach("loading")
    out = run.send(Stop(2.0, caller("stop")), answered=False)  # never answered: owes none
    assert not [e for e in out if isinstance(e, Unload)]


def test_a_result_of_an_earlier_attempt_is_dropped() -> None:
    run = reach("loading")
    run.send(Stop(2.0, caller("stop")))
    before = run.state
    assert run.send(Loaded(before.attempt - 1, ENTRY)) == ()
    assert run.state == before


def test_concurrent_starts_share_the_one_load_and_a_restart_is_refused() -> None:
    run = reach("checking")
    second = caller("second")
    assert run.send(Start(second)) == (Answer(second, None),)
    [refusal] = run.send(Restart(1, caller("restart")))
    assert isinstance(refusal, Refuse)
    assert isinstance(refusal.error, InvalidState)


def test_a_crash_stops_as_a_stop_would_and_is_said() -> None:
    run = reach("ready, ours")
    out = run.send(Crashed(CRASH))
    assert Unload(5.0) in out
    run.send(Unloaded(True, 5.0))
    assert ollama_status(run.state).detail == "crashed (ValueError: boom); model unloaded"


def test_an_unload_still_lingering_is_reported_and_never_sent_again() -> None:
    run = reach("stopped, lingering")
    assert (ollama_status(run.state).detail or "").endswith("does not send it again")
    start = caller("start")
    run.send(Start(start))
    run.send(Checked(run.state.attempt, ENTRY))  # still there: ours, leaving
    assert run.state.phase is Phase.FAILED
    assert not [e for e in run.effects if isinstance(e, StartLoad)][1:]


def test_a_closing_instance_refuses_every_command() -> None:
    run = reach("closing")
    for name, message in messages(run).items():
        if isinstance(message, COMMANDS):
            [refusal] = run.send(message)
            assert isinstance(refusal, Refuse), name
            assert isinstance(refusal.error, UnknownInstance)


class OllamaWorld(RuleBasedStateMachine):
    """The operator's commands and the workers' results in any order a real world allows;
    the unloads sent are counted against the loads Ollama answered."""

    def __init__(self) -> None:
        super().__init__()
        self.run = Run()
        self.checks: list[int] = []  # the attempts of the looks under way
        self.load: int | None = None  # the attempt of the load in flight
        self.answered = False  # Ollama answered the load in flight
        self.unloading = False
        self.closing: ReplyTo[None] | None = None
        self.asked: list[Any] = []
        self.done: list[Any] = []

    def send(self, message: Message) -> None:
        before = self.run.state
        out = self.run.send(message, answered=self.load is not None and self.answered)
        for effect in out:
            match effect:
                case Answer() | Refuse():
                    assert not any(effect.reply is r for r in self.done)
                    self.done.append(effect.reply)
                case SurveyFor() | CheckHealth() | CheckDeepHealth():
                    self.done.append(effect.reply)
                case Check():
                    self.checks.append(effect.attempt)
                case StartLoad():
                    assert self.load is None  # one load at a time
                    self.load, self.answered = effect.attempt, False
                case Unload():
                    assert before.owner is not Owner.THEIRS or before.loading
                    assert not self.unloading  # one unload at a time, once per load
                    self.unloading = True
                case CloseDown():
                    self.closing = effect.reply
                case _:
                    pass
        if not self.run.state.loading:
            self.load = None

    def ask(self, command: InstanceCommand) -> None:
        self.asked.append(command.reply)
        self.send(command)

    @rule(which=st.sampled_from(["start", "start", "stop", "status", "restart", "unload"]))
    def the_operator(self, which: str) -> None:
        reply = caller(f"c{len(self.asked)}")
        commands: dict[str, InstanceCommand] = {
            "start": Start(reply),
            "stop": Stop(2.0, reply),
            "status": GetStatus(reply),
            "restart": Restart(1, reply),
            "unload": Shutdown(5.0, reply),
        }
        self.ask(commands[which])

    @rule(resident=st.booleans())
    def a_check_ends(self, resident: bool) -> None:
        if self.checks:  # perhaps of an earlier attempt: a stop came meanwhile
            self.send(Checked(self.checks.pop(0), ENTRY if resident else None))

    @rule()
    def ollama_answers_the_load(self) -> None:
        self.answered = self.load is not None

    @rule(resident=st.booleans(), failed=st.booleans())
    def the_load_ends(self, resident: bool, failed: bool) -> None:
        if self.load is None:
            return
        error = BackendError("load failed") if failed else None
        self.send(Loaded(self.load, ENTRY if resident and not failed else None, error))

    @rule(gone=st.booleans())
    def the_unload_ends(self, gone: bool) -> None:
        if self.unloading:
            self.unloading = False
            self.send(Unloaded(gone, 2.0))

    @rule()
    def the_close_ends(self) -> None:
        if self.closing is not None and not self.unloading:
            reply, self.closing = self.closing, None
            self.send(Closed(reply))

    @rule()
    def a_crash(self) -> None:
        self.send(Crashed(CRASH))

    @invariant()
    def every_caller_is_answered_or_waits(self) -> None:
        waiting = [*self.run.state.stop_callers, *([self.closing] if self.closing else [])]
        for reply in self.asked:
            assert any(reply is r for r in self.done + waiting)


def test_no_sequence_of_messages_breaks_the_ollama_invariants() -> None:
    run_state_machine_as_test(
        OllamaWorld,
        settings=settings(
            max_examples=200, stateful_step_count=30, deadline=None, derandomize=True
        ),
    )


def test_a_stop_answers_with_empty_evidence_of_its_instance() -> None:
    run = reach("ready, theirs")
    [answer] = of_answers(run.send(Stop(1.0, caller("stop"))))
    assert answer.value == RunEvidence.empty(runtime="rt", instance_id="ollama-1")


# A model Ollama unloads by itself (issue 18: seen within a probe period, said in Ollama's
# terms, never reloaded by us); each watch look is timed for the edges.


def test_a_model_whose_keep_alive_ran_out_reads_unloaded_by_ollama_and_is_not_reloaded() -> None:
    run = reach("ready, ours")
    after = EXPIRES.replace(second=1)
    out = run.send(Watched(run.state.attempt, (), 0.003, after))
    assert NoteProbeTime(0.003, 5.0) in out
    assert not [e for e in out if isinstance(e, StartLoad | Check)]  # never reloaded
    status = ollama_status(run.state)
    assert status.state is InstanceState.DEGRADED
    assert status.detail == (
        f"model {TAG} unloaded by ollama: its keep_alive ran out at {EXPIRES.isoformat()} "
        "(it was loaded by us); inferactors does not reload it"
    )
    run.send(Watched(run.state.attempt, (), 0.002, after))  # said once, the words kept
    assert ollama_status(run.state).detail == status.detail


def test_a_model_unloaded_before_its_keep_alive_ran_out_says_so() -> None:
    run = reach("ready, theirs")
    before = datetime(2029, 12, 31, 23, 0, tzinfo=UTC)
    run.send(Watched(run.state.attempt, (ENTRY,), 0.001, before))
    assert ollama_status(run.state).state is InstanceState.RUNNING
    run.send(Watched(run.state.attempt, (), 0.001, before))
    assert ollama_status(run.state).detail == (
        f"model {TAG} unloaded before its keep_alive ran out (expires_at "
        f"{EXPIRES.isoformat()}): another client unloaded it or ollama made room for another "
        "model (it was loaded by someone else); inferactors does not reload it"
    )


def test_a_gone_model_without_a_known_expiry_is_said_plainly_and_a_start_clears_it() -> None:
    run = reach("ready, ours")
    run.send(Surveyed(Survey(Up(), resident=()), None))  # a status survey: no calendar time
    assert ollama_status(run.state).detail == (
        f"model {TAG} is no longer resident in /api/ps (it was loaded by us); "
        "inferactors does not reload it"
    )
    run.send(Stop(2.0, caller("stop")))
    run.send(Unloaded(True, 2.0))
    run.send(Start(caller("again")))
    assert run.state.evicted is None
    assert run.state.last_entry is None


def test_a_look_of_an_earlier_attempt_is_neither_timed_nor_applied() -> None:
    run = reach("ready, ours")
    out = run.send(Watched(run.state.attempt - 1, (), 0.004, EXPIRES))
    assert out == ()
    assert ollama_status(run.state).detail == "model resident"
