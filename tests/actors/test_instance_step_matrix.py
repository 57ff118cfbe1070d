"""Every message in every state of the instance state machine (``step.py``), synchronous.

Each of the named states of ``actors.step_support`` (loaded, starting, starting with a stop
waiting, crashed while starting, running, ready, stopping, exited, held down, stopped for
exposure, closing, adopted, adopted and watched) takes each message the inbox can carry
(every command, every worker's result, a crash). For every pair, the contract the actor
relies on holds:

* the step never raises, and returns only effects;
* a command's caller is answered exactly once: now (an answer, a refusal, or handed to the
  worker that answers it) or later (kept among the state's waiting callers), never both;
* no caller already waiting is dropped: still waiting, or answered now;
* one process at a time: a spawn only while none runs and none is starting;
* a stop under way keeps its reason while its process is current; a stop is only ever
  sent to the current process, and only when none is under way;
* a closing instance refuses every command ("being unloaded").

A message about a process that is not the current one changes nothing at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors.step_support import (
    STALE,
    STATES,
    messages_for,
    of_type,
    proc,
    reach,
)
from inferactors import UnknownInstance
from inferactors._actors.instance.effects import (
    Answer,
    AnswerStatus,
    CheckDeepHealth,
    CheckHealth,
    CloseDown,
    ConfirmAdopted,
    Effect,
    Refuse,
    Spawn,
    Terminate,
)
from inferactors._actors.messages import (
    Annotate,
    DeepHealth,
    GetHealth,
    GetStatus,
    Restart,
    Shutdown,
    Start,
    Stop,
)

COMMANDS = (Start, Restart, Stop, GetStatus, GetHealth, DeepHealth, Annotate, Shutdown)
PAIRS = [(state, message) for state in STATES for message in messages_for(reach(state))]


def answered(effects: tuple[Effect, ...]) -> list[Any]:
    return [e.reply for e in effects if isinstance(e, Answer | Refuse | AnswerStatus)]


def handed(effects: tuple[Effect, ...]) -> list[Any]:
    kinds = CheckHealth | CheckDeepHealth | ConfirmAdopted | CloseDown | Spawn
    return [e.reply for e in effects if isinstance(e, kinds)]


def test_every_state_is_reached_and_every_message_is_built() -> None:
    assert len(STATES) == 13
    assert len(PAIRS) == 13 * 31


@pytest.mark.parametrize(("state", "name"), PAIRS)
def test_the_contract_holds_for_every_message_in_every_state(state: str, name: str) -> None:
    run = reach(state)
    before = run.state
    message = messages_for(run)[name]
    out = run.send(message)
    after = run.state
    assert all(isinstance(effect, Effect) for effect in out)
    now = answered(out)
    assert len(now) == len({id(reply) for reply in now})  # nobody answered twice
    if isinstance(message, COMMANDS):
        reply = message.reply
        later = any(r is reply for r in after.callers())
        assert any(r is reply for r in now + handed(out)) or later, (state, name)
        assert not (any(r is reply for r in now) and later)
    for waiting in before.callers():  # nobody dropped
        assert any(r is waiting for r in after.callers() + now), (state, name)
    if of_type(out, Spawn):
        assert before.process is None
        assert not before.starting
        assert not before.closing
        assert before.exposed is None
    if before.stop_reason is not None and after.process is before.process:
        assert after.stop_reason is before.stop_reason  # a stop's reason is kept
    for terminate in of_type(out, Terminate):
        assert terminate.process is before.process or terminate.process is after.process
        assert before.stop_reason is None
    assert len(of_type(out, Terminate)) <= 1


@pytest.mark.parametrize(
    "name",
    ["Start", "Restart", "Stop", "GetStatus", "GetHealth", "DeepHealth", "Annotate", "Shutdown"],
)
def test_a_closing_instance_refuses_every_command(name: str) -> None:
    run = reach("closing (unloading)")
    message = messages_for(run)[name]
    assert isinstance(message, COMMANDS)
    before = run.state
    out = run.send(message)
    [refusal] = out
    assert isinstance(refusal, Refuse)
    assert refusal.reply is message.reply
    assert isinstance(refusal.error, UnknownInstance)
    assert str(refusal.error) == "chat-1 is being unloaded"
    assert run.state == before


@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("name", list(STALE))
def test_a_message_about_another_process_changes_nothing(state: str, name: str) -> None:
    run = reach(state)
    before = run.state
    out = run.send(STALE[name](proc(31337)))
    assert out == ()
    assert run.state == before
