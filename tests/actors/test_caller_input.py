"""What a caller passes in Python is held to the run file's rules: a spec with a value of
the wrong type is refused at admission by the one converter's words, and a handle that is
not one gets a typed answer (``status`` stays the call that never raises)."""

from __future__ import annotations

from typing import Any

import pytest

from inferactors import (
    AdmissionRefused,
    InferConfig,
    InferenceSpec,
    InferFlavor,
    InstanceState,
    InvalidConfig,
    ServeArgs,
    open_runtime,
)
from inferactors._config.convert import checked_spec

BAD_SERVE = [
    (ServeArgs(port=True), "$.serve.port: expected int, got bool"),
    (ServeArgs(port=8090.7), "$.serve.port: expected int, got float"),  # type: ignore[arg-type]
    (ServeArgs(ctx="4k"), "$.serve.ctx: expected int, got string"),  # type: ignore[arg-type]
    (ServeArgs(host=5), "$.serve.host: expected string, got int"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("serve", "words"), BAD_SERVE)
async def test_a_mistyped_spec_is_refused_before_anything_is_probed(
    serve: ServeArgs, words: str
) -> None:
    spec = InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        for call in (runtime.admit, runtime.load):
            with pytest.raises(InvalidConfig) as refused:
                await call(spec)
            assert str(refused.value) == words


async def test_a_spec_that_is_not_one_is_refused_in_words() -> None:
    spec: Any = InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, serve="8080")  # type: ignore[arg-type]
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        with pytest.raises(InvalidConfig, match=r"^\$: not a valid spec: AttributeError"):
            await runtime.load(spec)


@pytest.mark.parametrize("handle", [None, "chat", 42])
async def test_a_handle_that_is_not_one_gets_a_typed_answer(handle: Any) -> None:
    words = f"handle: expected an InstanceHandle, got {type(handle).__name__}"
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        status = runtime.status(handle)
        assert (status.state, status.detail) == (InstanceState.UNKNOWN, words)
        for call in (runtime.start, runtime.stop, runtime.unload, runtime.health):
            with pytest.raises(InvalidConfig, match=words):
                await call(handle)


class Port(int):
    """An int subclass, as a caller's own type might be."""


class Host(str):
    """A str subclass whose equality lies."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def test_a_checked_spec_holds_plain_values() -> None:
    spec = InferenceSpec(
        role="chat",
        runtime=InferFlavor.LLAMACPP,
        serve=ServeArgs(
            host=Host("127.0.0.2"),
            port=Port(8080),
            extra_args=(arg for arg in ["--threads", "2"]),  # type: ignore[arg-type]
        ),
    )
    checked = checked_spec(spec)
    assert checked.serve.extra_args == ("--threads", "2")
    assert type(checked.serve.port) is int
    assert type(checked.serve.host) is str
    assert str(checked.bind_ip()) == "127.0.0.2"


async def test_a_generator_of_arguments_is_admitted_like_a_list() -> None:
    serve = ServeArgs(port=9, extra_args=(arg for arg in ["--threads", "2"]))  # type: ignore[arg-type]
    spec = InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, serve=serve)
    async with open_runtime(InferConfig.adopted(InferFlavor.LLAMACPP)) as runtime:
        with pytest.raises(AdmissionRefused, match=r"no infer\.llamacpp server answering"):
            await runtime.admit(spec)  # checked, then refused for the missing server only
