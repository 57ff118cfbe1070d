"""The CLI's event printer gives a spawn refused for a tampered model one line naming the
model, the shard and what the check found, and says the instance is held (issue 8, item 4)."""

from __future__ import annotations

from inferactors import ModelTampered
from inferactors._cli.output import describe_event


def test_a_tampered_model_is_one_line_naming_the_shard_and_the_hold() -> None:
    why = "shard tiny.gguf: BLAKE3 differs from the registry (tampered or replaced)"
    line = describe_event(ModelTampered("chat-1", "tiny", "tiny.gguf", why, 3.0))
    assert line == (
        f"chat-1  TAMPERED: model tiny, {why}; not started, held until the model is "
        "re-registered or the instance reloaded"
    )
    assert "\n" not in line
