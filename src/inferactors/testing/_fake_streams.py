"""How the fake servers play a streamed completion: how many tokens, how fast, and the
stream faults (the program that sends them is ``_fake_server``).

A streamed one-token completion (``_fake_replies.completion_events``) has events before
its token, the token event, and events after it (the last chunk, ``[DONE]``). Played here:

- ``stream_tokens`` N: the token event N times (default 1: the one-token answer as is);
- ``stream_token_delay_s``: a pause before each token event after the first;
- ``stream_die_after`` K: after the K-th token event the server dies (SIGKILL), mid-answer:
  the client's connection breaks (llama-server's chunked stream ends without its last
  chunk; mlx_lm.server's, which ends at the close, ends early);
- ``stream_forever``: token events without end, one every ``stream_token_delay_s`` (at
  least `FOREVER_MIN_DELAY_S`), until the client leaves.

`stream_frames` writes them (it sleeps between tokens). Like the fake server program, this
module imports nothing of the ``inferactors`` package.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from ._fake_replies import TOKEN

if TYPE_CHECKING:
    from ._fake_faults import FakeServerFaults

FOREVER_MIN_DELAY_S = 0.05
"""The shortest pause between two token events of a stream that never ends, float seconds."""


@attrs.frozen
class Pause:
    """Wait this long (float seconds) before the next event."""

    seconds: float


@attrs.frozen
class DieNow:
    """The server dies here (SIGKILL), the stream unfinished."""


Step = object | Pause | DieNow
"""An event to write (a JSON document or a text such as ``[DONE]``), a pause, or death."""


def split_at_token(
    events: tuple[object, ...],
) -> tuple[tuple[object, ...], object, tuple[object, ...]]:
    """The events before the token event, the token event, and the events after it.

    Raises:
        ValueError: no event carries the token.
    """
    for index, event in enumerate(events):
        if _says_token(event):
            return events[:index], event, events[index + 1 :]
    raise ValueError("no event of the stream carries the token")


def stream_steps(
    events: tuple[object, ...],
    *,
    tokens: int = 1,
    delay_s: float = 0.0,
    die_after: int | None = None,
    forever: bool = False,
) -> Iterator[Step]:
    """The steps of one streamed completion under the stream faults (module docstring)."""
    before, token, after = split_at_token(events)
    yield from before
    count = 0
    pause = max(delay_s, FOREVER_MIN_DELAY_S) if forever else delay_s
    while forever or count < tokens:
        if count > 0 and pause > 0:
            yield Pause(pause)
        yield token
        count += 1
        if die_after is not None and count >= die_after:
            yield DieNow()
            return
    yield from after


def _says_token(event: object) -> bool:
    if not isinstance(event, dict):
        return False
    if event.get("content") == TOKEN:  # llama-server's /completion
        return True
    choices: Any = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    delta = choice.get("delta")
    said = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return bool(said == TOKEN)


def stream_frames(
    events: tuple[object, ...], faults: FakeServerFaults, *, chunked: bool
) -> Iterator[bytes | None]:
    """The bytes of each event as the server writes them (``data: ...`` frames, in HTTP
    chunks when ``chunked``), paced by the faults (this sleeps); None where it must die."""
    steps = stream_steps(
        events,
        tokens=faults.stream_tokens,
        delay_s=faults.stream_token_delay_s,
        die_after=faults.stream_die_after,
        forever=faults.stream_forever,
    )
    for step in steps:
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            continue
        if isinstance(step, DieNow):
            yield None
            return
        text = step if isinstance(step, str) else json.dumps(step)
        frame = f"data: {text}\n\n".encode()
        yield b"%x\r\n%s\r\n" % (len(frame), frame) if chunked else frame
