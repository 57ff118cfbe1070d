"""Restart policy, managed and per-runtime configs, and the CLI's run file.

Covers seed-behaviour.md section 1 ("Config") and checklist items 1 and 15.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._config.config import ControlMode, InferConfig, ManagedConfig
from inferactors._config.convert import load_run_config, run_config_from_toml
from inferactors._config.runfile import ManagedSection, RunConfig, RunInstance
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._config.supervision import RestartPolicy
from inferactors._errors import InvalidConfig
from inferactors._flavor import InferFlavor

LLAMA = InferFlavor.LLAMACPP
MLX = InferFlavor.MLX_LM
OLLAMA = InferFlavor.OLLAMA


def managed(**changes: Any) -> ManagedConfig:
    base = ManagedConfig(registry=Path("/srv/models.json"), data_root=Path("/srv/data"))
    return attrs.evolve(base, **changes)


# ---- restart policy (checklist 15) ---------------------------------------------------------


def test_restart_policy_defaults() -> None:
    policy = RestartPolicy()
    assert (policy.max_restarts, policy.base_s, policy.cap_s, policy.stable_after_s) == (
        5,
        2.0,
        60.0,
        60.0,
    )


def test_delay_doubles_up_to_the_cap() -> None:
    policy = RestartPolicy(base_s=2.0, cap_s=10.0)
    assert [policy.delay_s(n) for n in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]


@given(st.integers(-5, 10_000))
def test_delay_is_bounded_for_any_count(n: int) -> None:
    policy = RestartPolicy(base_s=0.001, cap_s=1e9)
    delay = policy.delay_s(n)
    assert 0.001 <= delay <= 0.001 * 2**16
    assert delay == 0.001 * 2 ** min(max(n, 0), 16)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (RestartPolicy(max_restarts=-1), "restart.max_restarts"),
        (RestartPolicy(base_s=0.0), "restart.base_s"),
        (RestartPolicy(base_s=float("nan")), "restart.base_s"),
        (RestartPolicy(cap_s=float("inf")), "restart.cap_s"),
        (RestartPolicy(base_s=5.0, cap_s=4.0), "restart.cap_s"),
        (RestartPolicy(stable_after_s=-1.0), "restart.stable_after_s"),
    ],
)
def test_bad_restart_policies_name_the_field(policy: RestartPolicy, field: str) -> None:
    with pytest.raises(InvalidConfig, match=rf"^{field} "):
        policy.validate()


# ---- managed config ------------------------------------------------------------------------


def test_managed_defaults() -> None:
    config = managed()
    assert config.env_passthrough == ()  # HOME and PATH are the server's own (issue 8)
    assert config.keep_alive == "30m"
    assert config.restart == RestartPolicy()
    assert config.serve_program is None
    config.validate()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"env": (("BAD NAME", "x"),)}, "managed.env[0] 'BAD NAME'"),
        ({"env": (("OK", "a"), ("LLAMA_ARG_HOST", "0.0.0.0"))}, "managed.env[1] LLAMA_ARG_HOST"),
        ({"env": (("OK", "a\x00b"),)}, "managed.env[0] (OK) must not contain NUL"),
        ({"env_passthrough": ("HOME", "1PATH")}, "managed.env_passthrough[1]"),
        ({"env_passthrough": ("LLAMA_ARG_MODEL",)}, "managed.env_passthrough[0] LLAMA_ARG_"),
        ({"run_as": "root"}, "managed.run_as must not be root"),
        ({"run_as": "0"}, "managed.run_as must not be root"),
        ({"run_as": "1000:0"}, "managed.run_as must not be root"),
        ({"run_as": "bad user"}, "managed.run_as 'bad user'"),
        ({"keep_alive": "3600s5"}, 'managed.keep_alive "3600s5"'),
        ({"keep_alive": "5 minutes"}, "managed.keep_alive"),
        ({"keep_alive": True}, "managed.keep_alive"),
        ({"version_probe": ()}, "managed.version_probe"),
        ({"readiness_timeout_s": 0.0}, "managed.readiness_timeout_s"),
        ({"restart": RestartPolicy(base_s=-1.0)}, "managed.restart.base_s"),
    ],
)
def test_bad_managed_settings_name_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        managed(**changes).validate()
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "keep_alive", ["30m", "1h30m", "-1m", "1.5h", "1s", -1, 3600, "-1", "3600", "+60", 9223372036]
)
def test_ollama_keep_alive_forms_are_accepted(keep_alive: str | int) -> None:
    """A numeric string is whole seconds, as Ollama reads a number (issue 9 item 7)."""
    managed(keep_alive=keep_alive).validate()


@pytest.mark.parametrize("run_as", ["llm", "svc-infer", "1000", "1000:1000"])
def test_unprivileged_run_as_forms_are_accepted(run_as: str) -> None:
    managed(run_as=run_as).validate()


# ---- per-runtime config (checklist 1) ------------------------------------------------------


@pytest.mark.parametrize("flavor", list(InferFlavor))
def test_adapter_ids_and_modes(flavor: InferFlavor) -> None:
    adopted = InferConfig.adopted(flavor)
    assert adopted.mode is ControlMode.ADOPTED
    assert adopted.adapter_id == f"{flavor.id}.adopted"
    owned = InferConfig.managing(flavor, managed())
    assert owned.mode is ControlMode.MANAGED
    assert owned.adapter_id == flavor.id


def test_infer_config_defaults() -> None:
    config = InferConfig.adopted(LLAMA)
    assert (config.probe_timeout_s, config.deep_timeout_s) == (2.0, 300.0)
    assert config.probe_port is None
    assert config.allowed_ports is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"probe_timeout_s": 0.0}, "probe_timeout_s"),
        ({"deep_timeout_s": -1.0}, "deep_timeout_s"),
        ({"probe_port": 0}, "probe_port"),
        ({"probe_port": 70000}, "probe_port"),
        ({"allowed_ports": (9000, 8000)}, "allowed_ports"),
        ({"allowed_ports": (0, 8000)}, r"allowed_ports\[0\]"),
        ({"allowed_ports": (8000, 65536)}, r"allowed_ports\[1\]"),
    ],
)
def test_named_constructors_validate(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidConfig, match=rf"^{field}"):
        InferConfig.adopted(LLAMA, **kwargs)  # type: ignore[arg-type]  # parametrized kwargs
    with pytest.raises(InvalidConfig, match=rf"^{field}"):
        InferConfig.managing(LLAMA, managed(), **kwargs)  # type: ignore[arg-type]  # same


def test_managing_validates_the_managed_settings() -> None:
    with pytest.raises(InvalidConfig, match=r"^managed\.run_as"):
        InferConfig.managing(LLAMA, managed(run_as="root"))


def test_a_single_port_range_is_fine() -> None:
    assert InferConfig.adopted(LLAMA, allowed_ports=(8090, 8090)).allowed_ports == (8090, 8090)


# ---- run file ------------------------------------------------------------------------------

RUN_FILE = """
node_id = "studio"
probe_timeout_s = 3

[managed]
registry = "models/registry.json"
data_root = "/var/lib/inferactors"
run_as = "llm"
keep_alive = "1h"
env = { LLAMA_CACHE = "/tmp/cache" }
env_passthrough = ["HOME"]

[managed.serve_programs]
"infer.llamacpp" = "bin/llama-server"
"infer.mlx-lm" = "/opt/mlx/bin/mlx_lm.server"

[managed.restart]
max_restarts = 3
base_s = 1.5

[[instances]]
mode = "managed"
role = "planner"
runtime = "infer.llamacpp"
model = "qwen2.5-7b"
latency_class = "interactive"

[instances.serve]
port = 9001
ctx = 8192
extra_args = ["-ngl", "99"]

[[instances]]
mode = "adopted"
role = "chat"
runtime = "infer.ollama"
"""


def load(text: str = RUN_FILE) -> RunConfig:
    return run_config_from_toml(text, Path("/etc/inferactors"))


def test_run_file_with_a_managed_and_an_adopted_instance_loads() -> None:
    config = load()
    assert config.node_id == "studio"
    assert config.probe_timeout_s == 3.0
    assert config.deep_timeout_s == 300.0
    planner, chat = config.instances
    assert planner == RunInstance(
        mode=ControlMode.MANAGED,
        spec=attrs.evolve(
            planner.spec,
            serve=ServeArgs(port=9001, ctx=8192, extra_args=("-ngl", "99")),
        ),
    )
    assert planner.spec.model == "qwen2.5-7b"
    assert chat == RunInstance(ControlMode.ADOPTED, InferenceSpec(role="chat", runtime=OLLAMA))


def test_relative_paths_resolve_against_the_run_file_directory() -> None:
    section = load().managed
    assert section is not None
    assert section.registry == Path("/etc/inferactors/models/registry.json")
    assert section.data_root == Path("/var/lib/inferactors")
    assert section.serve_program(LLAMA) == Path("/etc/inferactors/bin/llama-server")
    assert section.serve_program(MLX) == Path("/opt/mlx/bin/mlx_lm.server")
    assert section.serve_program(OLLAMA) is None
    assert section.env == (("LLAMA_CACHE", "/tmp/cache"),)
    assert section.restart == RestartPolicy(max_restarts=3, base_s=1.5)


def test_infer_config_per_runtime() -> None:
    config = load()
    llama = config.infer_config(LLAMA, ControlMode.MANAGED)
    assert llama.mode is ControlMode.MANAGED
    assert llama.probe_timeout_s == 3.0
    assert llama.managed is not None
    assert llama.managed.serve_program == Path("/etc/inferactors/bin/llama-server")
    assert llama.managed.run_as == "llm"
    assert llama.managed.keep_alive == "1h"
    assert llama.managed.env_passthrough == ("HOME",)
    adopted = config.infer_config(OLLAMA, ControlMode.ADOPTED)
    assert adopted == InferConfig(OLLAMA, None, 3.0, 300.0)


def test_infer_config_managed_needs_a_managed_section() -> None:
    with pytest.raises(InvalidConfig, match=r"\$\.managed"):
        RunConfig().infer_config(LLAMA, ControlMode.MANAGED)


def test_an_empty_run_file_is_all_defaults() -> None:
    assert load("") == RunConfig()


def test_load_run_config_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_FILE, encoding="utf-8")
    config = load_run_config(path)
    assert config.managed is not None
    assert config.managed.registry == tmp_path / "models/registry.json"


def test_load_run_config_errors_start_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_FILE.replace("port = 9001", 'port = "9001"'), encoding="utf-8")
    with pytest.raises(InvalidConfig) as info:
        load_run_config(path)
    assert str(info.value) == f"{path}: $.instances[0].serve.port: expected int, got string"
    with pytest.raises(InvalidConfig, match="cannot read the run file"):
        load_run_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('mode = "adopted"', 'mode = "watch"', '$.instances[1].mode: expected one of "managed"'),
        ('mode = "adopted"', "", "$.instances[1].mode: required key missing"),
        ('role = "chat"', 'role = "chat"\ncolour = "red"', "$.instances[1].colour: unknown key"),
        ("ctx = 8192", "ctx = 8192\nthreads = 4", "$.instances[0].serve.threads: unknown key"),
        ("base_s = 1.5", "base_s = true", "$.managed.restart.base_s: expected number, got bool"),
        ('keep_alive = "1h"', "keep_alive = 1.5", "$.managed.keep_alive: expected string or int"),
        ('"infer.mlx-lm" =', '"infer.mlx" =', '$.managed.serve_programs["infer.mlx"]: expected'),
        ('LLAMA_CACHE = "/tmp/cache"', "LLAMA_CACHE = 1", "$.managed.env.LLAMA_CACHE: expected"),
        ('data_root = "/var/lib/inferactors"', 'data_root = ""', "$.managed.data_root: expected a"),
        ('node_id = "studio"', 'node_id = "my box"', "$.node_id must be a plain token"),
        ("probe_timeout_s = 3", "probe_timeout_s = 0", "$.probe_timeout_s must be a positive"),
        ("port = 9001", "port = 0", "$.instances[0].serve.port must not be 0"),
        ('["-ngl", "99"]', '["-ngl", "99", "--host"]', "$.instances[0].serve.extra_args[2] "),
        ('model = "qwen2.5-7b"', "", '$.instances[0].model is required when mode = "managed"'),
        ('run_as = "llm"', 'run_as = "root"', "$.managed.run_as must not be root"),
        ("env = { LLAMA_CACHE", 'env = { LLAMA_ARG_PORT = "1", X', "$.managed.env[0] LLAMA_ARG_"),
        ("[managed]", "[managed]\nbogus = 1", "$.managed.bogus: unknown key"),
        ('"infer.llamacpp" = "bin/', '"x" = "bin/', "$.managed.serve_programs.x: expected"),
    ],
)  # fmt: skip
def test_run_file_errors_name_the_path(old: str, new: str, message: str) -> None:
    assert old in RUN_FILE
    with pytest.raises(InvalidConfig) as info:
        load(RUN_FILE.replace(old, new, 1))
    assert message in str(info.value)


def test_managed_instance_without_a_managed_section_is_refused() -> None:
    text = RUN_FILE[RUN_FILE.index("[[instances]]") :]
    with pytest.raises(InvalidConfig, match=r"\$\.instances\[0\]: a managed instance needs"):
        load(text)


def test_managed_ollama_needs_no_serve_program() -> None:
    config = RunConfig(
        managed=ManagedSection(registry=Path("/r.json"), data_root=Path("/d")),
        instances=(RunInstance(ControlMode.MANAGED, InferenceSpec("chat", OLLAMA, "llama3")),),
    )
    config.validate()


def test_toml_syntax_errors_name_the_line() -> None:
    with pytest.raises(InvalidConfig, match=r"TOML syntax error: .*line 2"):
        load('node_id = "a"\nprobe_timeout_s = = 3\n')


def test_instances_must_be_an_array_of_tables() -> None:
    with pytest.raises(InvalidConfig, match=r"^\$\.instances: expected a list, got string$"):
        load('instances = "x"')
    with pytest.raises(InvalidConfig, match=r"^\$\.instances\[0\]: expected a table, got int$"):
        load("instances = [1]")
