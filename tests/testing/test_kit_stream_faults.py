"""The fakes' stream faults: a stream of N tokens, paced, that dies mid-answer or never
ends (`StreamDies`, `EndlessStream`), as steps of a timeline and as the fake's flags."""

from __future__ import annotations

import itertools
import json

import pytest

from inferactors import InvalidConfig
from inferactors.testing import EndlessStream, FakeServerFaults, StreamDies, Timeline
from inferactors.testing._fake_faults import parse_fake_server_args
from inferactors.testing._fake_replies import TOKEN, completion_events
from inferactors.testing._fake_streams import DieNow, Pause, stream_steps
from inferactors.testing._timeline_data import timeline_from_toml, timeline_to_data

EVENTS = tuple(completion_events("llamacpp", "tiny.gguf", "/v1/chat/completions", 1))


def _tokens(steps: list[object]) -> int:
    return sum(TOKEN in json.dumps(step) for step in steps if not isinstance(step, Pause | DieNow))


def test_the_steps_become_the_fakes_flags_and_read_back() -> None:
    dies = Timeline.of(StreamDies(after_tokens=2, tokens=5, every_s=0.1))
    assert dies.server_faults("mlx") == FakeServerFaults(
        stream_die_after=2, stream_tokens=5, stream_token_delay_s=0.1
    )
    endless = Timeline.of(EndlessStream(every_s=0.2))
    assert endless.server_faults() == FakeServerFaults(
        stream_forever=True, stream_token_delay_s=0.2
    )
    for timeline in (dies, endless):
        data = timeline_to_data(timeline)
        assert data["steps"][0]["fault"] in ("stream_dies", "endless_stream")
        faults = timeline.server_faults()
        assert parse_fake_server_args(["--port", "1", *faults.args()]).faults == faults
    toml = '[[steps]]\nfault = "stream_dies"\nafter_tokens = 0'
    with pytest.raises(InvalidConfig, match=r"after_tokens: must be >= 1"):
        timeline_from_toml(toml)


def test_a_stream_of_n_tokens_keeps_its_head_and_its_end() -> None:
    steps = list(stream_steps(EVENTS, tokens=3, delay_s=0.5))
    assert _tokens(steps) == 3
    assert steps.count(Pause(0.5)) == 2  # before each token after the first
    assert steps[0] == EVENTS[0]
    assert steps[-1] == "[DONE]"


def test_a_stream_that_dies_stops_after_k_tokens_without_its_end() -> None:
    steps = list(stream_steps(EVENTS, tokens=5, die_after=2))
    assert _tokens(steps) == 2
    assert steps[-1] == DieNow()
    assert "[DONE]" not in steps


def test_a_stream_that_never_ends_keeps_saying_tokens() -> None:
    steps = list(itertools.islice(stream_steps(EVENTS, forever=True), 200))
    assert _tokens(steps) >= 99
    assert "[DONE]" not in steps
    assert Pause(0.05) in steps  # never faster than the floor


@pytest.mark.parametrize("path", ["/v1/completions", "/completion"])
def test_every_stream_shape_has_a_token_event(path: str) -> None:
    events = tuple(completion_events("llamacpp", "m", path, 1))
    assert _tokens(list(stream_steps(events, tokens=4))) == 4
