"""What a run file may leave out: the llama-server of a managed llama.cpp instance and, as
root, ``run_as`` (`RunConfig.with_defaults`, filled from `RunDefaults`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors import InvalidConfig
from inferactors._config.convert import run_config_from_toml
from inferactors._config.runfile import RunConfig, RunDefaults
from inferactors._flavor import InferFlavor

BARE = """
[managed]
registry = "models.json"
data_root = "state"

[[instances]]
mode = "managed"
role = "chat"
runtime = "infer.llamacpp"
model = "tiny"
"""
ADOPTED = """
[[instances]]
mode = "adopted"
role = "other"
runtime = "infer.llamacpp"
serve = { port = 8091 }
"""
SERVER = Path("/opt/llama/bin/llama-server")


def load(text: str) -> RunConfig:
    return run_config_from_toml(text, Path("/srv/clone"))


def test_a_managed_llamacpp_instance_may_leave_its_program_out() -> None:
    config = load(BARE)  # refused before: serve_programs has no "infer.llamacpp" entry
    assert config.needs_llama_server()
    filled = config.with_defaults(RunDefaults(llama_server=SERVER, looked="on PATH"))
    assert filled.managed is not None
    assert filled.managed.serve_program(InferFlavor.LLAMACPP) == SERVER
    assert not filled.needs_llama_server()
    assert filled.managed.run_as is None  # not root: the supervisor's own user


def test_a_program_the_run_file_names_is_kept() -> None:
    text = BARE.replace("[managed]\n", '[managed]\nserve_programs = { "infer.llamacpp" = "b/s" }\n')
    config = load(text)
    assert not config.needs_llama_server()
    filled = config.with_defaults(RunDefaults(llama_server=SERVER))
    assert filled.managed is not None
    assert filled.managed.serve_program(InferFlavor.LLAMACPP) == Path("/srv/clone/b/s")


def test_no_llama_server_found_is_refused_naming_the_field_and_the_instance() -> None:
    head, managed = BARE.split("[[instances]]")
    config = load(head + ADOPTED + "[[instances]]" + managed)  # the managed one second
    looked = "$INFERACTORS_LLAMA_SERVER unset, none on PATH, no pinned build at /x"
    with pytest.raises(InvalidConfig) as info:
        config.with_defaults(RunDefaults(looked=looked))
    message = str(info.value)
    assert message.startswith('$.managed.serve_programs has no "infer.llamacpp" entry for ')
    assert "$.instances[1]," in message
    assert looked in message
    assert "inferactors llama-server" in message


def test_only_adopted_llamacpp_instances_need_no_server() -> None:
    config = load(BARE.split("[[instances]]")[0] + ADOPTED)
    assert not config.needs_llama_server()
    assert config.with_defaults(RunDefaults()) == config


@pytest.mark.parametrize(("written", "expected"), [(None, "nobody"), ("llm", "llm")])
def test_run_as_left_out_takes_the_default_and_a_named_one_is_kept(
    written: str | None, expected: str
) -> None:
    text = (
        BARE
        if written is None
        else BARE.replace("[managed]\n", f'[managed]\nrun_as = "{written}"\n')
    )
    filled = load(text).with_defaults(RunDefaults(llama_server=SERVER, run_as="nobody"))
    assert filled.managed is not None
    assert filled.managed.run_as == expected


def test_a_managed_mlx_instance_still_needs_its_program() -> None:
    text = BARE.replace("infer.llamacpp", "infer.mlx-lm")
    with pytest.raises(InvalidConfig, match=r'serve_programs has no "infer.mlx-lm" entry'):
        load(text)
