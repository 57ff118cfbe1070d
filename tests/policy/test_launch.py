"""Launch building: format checks, the real servers' argv, and the cleared environment.

Covers seed-behaviour.md section 2 and checklist items 36 (format), 39 and 40 (argv, in the
real llama-server / mlx_lm.server flags) and 43 (environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._errors import AdmissionRefused, InvalidConfig, Unsupported
from inferactors._flavor import InferFlavor, ModelFormat
from inferactors._models.manifest import ResolvedModel
from inferactors._policy.launch import DEFAULT_PATH, Launch, build_launch, check_format, launch_env

LLAMA = InferFlavor.LLAMACPP
MLX = InferFlavor.MLX_LM
OLLAMA = InferFlavor.OLLAMA
PROGRAM = Path("/opt/llama/bin/llama-server")
CWD = Path("/srv/data/planner-1a2b3c4d-local")

QWEN = ResolvedModel(
    name="qwen",
    format=ModelFormat.GGUF,
    root=Path("/models/qwen"),
    shards=(Path("/models/qwen/qwen-00001-of-00002.gguf"), Path("/models/qwen/qwen-00002.gguf")),
)
TINY = ResolvedModel(
    name="tiny", format=ModelFormat.GGUF, root=Path("/models/tiny"), shards=(Path("/m/t.gguf"),)
)
PHI_MLX = ResolvedModel(
    name="phi", format=ModelFormat.MLX, root=Path("/models/phi"), shards=(Path("/models/phi/w"),)
)


def llama_spec(**serve: object) -> InferenceSpec:
    args = ServeArgs(**serve)  # type: ignore[arg-type]  # test helper forwards keyword fields
    return InferenceSpec(role="planner", runtime=LLAMA, model="qwen", serve=args)


def launch(
    spec: InferenceSpec,
    model: ResolvedModel = QWEN,
    draft: ResolvedModel | None = None,
    parent_env: dict[str, str] | None = None,
) -> Launch:
    return build_launch(
        spec,
        model,
        draft,
        program=PROGRAM,
        cwd=CWD,
        env=(),
        passthrough=(),  # the default: nothing of the supervisor's (issue 8)
        parent_env=parent_env or {},
    )


# ---- format checks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flavor", "fmt", "ok"),
    [
        (LLAMA, ModelFormat.GGUF, True),
        (LLAMA, ModelFormat.MLX, False),
        (LLAMA, ModelFormat.SAFETENSORS, False),
        (MLX, ModelFormat.MLX, True),
        (MLX, ModelFormat.SAFETENSORS, True),
        (MLX, ModelFormat.GGUF, False),
        (OLLAMA, ModelFormat.OLLAMA, True),
        (OLLAMA, ModelFormat.GGUF, False),
    ],
)
def test_check_format(flavor: InferFlavor, fmt: ModelFormat, ok: bool) -> None:
    model = ResolvedModel(name="m1", format=fmt, root=Path("/m"), shards=(Path("/m/a"),))
    if ok:
        check_format(flavor, model)
        return
    with pytest.raises(AdmissionRefused) as info:
        check_format(flavor, model)
    assert str(info.value) == f"{flavor.id} cannot load a {fmt.value} model (m1)"


def test_llamacpp_refuses_an_mlx_model_with_the_reference_wording() -> None:
    with pytest.raises(
        AdmissionRefused, match=r"^infer\.llamacpp cannot load a mlx model \(phi\)$"
    ):
        launch(llama_spec(), PHI_MLX)


def test_a_draft_in_the_wrong_format_is_refused() -> None:
    with pytest.raises(AdmissionRefused, match=r"cannot load a mlx model \(phi\)"):
        launch(llama_spec(draft_model="phi"), QWEN, PHI_MLX)


# ---- argv (checklist 39, 40) ---------------------------------------------------------------


def test_llamacpp_argv_with_every_option() -> None:
    spec = llama_spec(port=9001, ctx=4096, kv_quant="q8_0", draft_model="tiny", extra_args=(
        "--threads", "2", "--flash-attn", "on"
    ))  # fmt: skip
    assert launch(spec, QWEN, TINY).argv == (
        "/opt/llama/bin/llama-server",
        "-m", "/models/qwen/qwen-00001-of-00002.gguf",
        "--host", "127.0.0.1",
        "--port", "9001",
        "-c", "4096",
        "-ctk", "q8_0", "-ctv", "q8_0",
        "-md", "/m/t.gguf",
        "--threads", "2", "--flash-attn", "on",
    )  # fmt: skip


def test_llamacpp_argv_minimal_uses_the_default_port() -> None:
    assert launch(llama_spec()).args == (
        "-m", "/models/qwen/qwen-00001-of-00002.gguf", "--host", "127.0.0.1", "--port", "8090"
    )  # fmt: skip


@pytest.mark.parametrize(("host", "bare"), [("::1", "::1"), ("localhost", "127.0.0.1")])
def test_host_is_given_as_a_bare_ip(host: str, bare: str) -> None:
    args = launch(llama_spec(host=host)).args
    assert args[args.index("--host") + 1] == bare


def test_mlx_argv_passes_the_model_directory() -> None:
    spec = InferenceSpec(
        role="coder",
        runtime=MLX,
        model="phi",
        serve=ServeArgs(port=8082, ctx=4096, kv_quant="q8_0", extra_args=("--max-tokens", "512")),
    )
    assert launch(spec, PHI_MLX).argv == (
        "/opt/llama/bin/llama-server",
        "--model", "/models/phi",
        "--host", "127.0.0.1",
        "--port", "8082",
        "--max-tokens", "512",
    )  # fmt: skip


def test_mlx_minimal_argv() -> None:
    spec = InferenceSpec(role="coder", runtime=MLX, model="phi")
    assert launch(spec, PHI_MLX).args == (
        "--model", "/models/phi", "--host", "127.0.0.1", "--port", "8081"
    )  # fmt: skip


def test_launch_carries_program_and_cwd() -> None:
    built = launch(llama_spec())
    assert built.program == PROGRAM
    assert built.cwd == CWD
    assert built.argv[0] == str(PROGRAM)


def test_a_model_without_shards_is_refused() -> None:
    empty = ResolvedModel(name="hollow", format=ModelFormat.GGUF, root=Path("/m"), shards=())
    with pytest.raises(AdmissionRefused, match=r"^model hollow has no shards$"):
        launch(llama_spec(), empty)
    with pytest.raises(AdmissionRefused, match=r"^model hollow has no shards$"):
        launch(llama_spec(draft_model="hollow"), QWEN, empty)


def test_relative_model_paths_are_refused() -> None:
    relative = ResolvedModel(
        name="rel", format=ModelFormat.GGUF, root=Path("m"), shards=(Path("m/a.gguf"),)
    )
    with pytest.raises(InvalidConfig, match="not absolute"):
        launch(llama_spec(), relative)


def test_draft_must_match_the_spec() -> None:
    with pytest.raises(InvalidConfig, match=r"serve\.draft_model names tiny"):
        launch(llama_spec(draft_model="tiny"), QWEN, None)
    with pytest.raises(InvalidConfig, match=r"draft model \(tiny\) was given"):
        launch(llama_spec(), QWEN, TINY)


def test_ollama_is_never_launched() -> None:
    spec = InferenceSpec(role="chat", runtime=OLLAMA, model="llama3")
    ollama_model = ResolvedModel(
        name="llama3", format=ModelFormat.OLLAMA, root=Path("/o"), shards=()
    )
    with pytest.raises(Unsupported, match=r"^infer\.ollama is not a process"):
        launch(spec, ollama_model)


def test_an_invalid_spec_is_refused_before_building() -> None:
    with pytest.raises(InvalidConfig, match=r"serve\.extra_args\[0\]"):
        launch(llama_spec(extra_args=("--host", "0.0.0.0")))
    with pytest.raises(InvalidConfig, match=r"serve\.host"):
        launch(llama_spec(host="0.0.0.0"))


PLAIN = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:+/-]{0,10}", fullmatch=True)
NUMERIC = st.integers(-1, 1 << 20).map(str)
FLAGS_1 = ["--threads", "-t", "-ngl", "--temp", "--seed", "-b", "-np", "--top-k"]
FLAGS_0 = ["--embedding", "--mlock", "--jinja", "--metrics", "--no-mmap"]


@st.composite
def llama_extra_args(draw: st.DrawFn) -> tuple[str, ...]:
    out: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out.append(draw(st.sampled_from(FLAGS_0)))
        else:
            out += [draw(st.sampled_from(FLAGS_1)), draw(NUMERIC)]
    return tuple(out)


@given(
    extra=llama_extra_args(),
    port=st.integers(1, 65535),
    host=st.sampled_from(["127.0.0.1", "::1", "localhost", "127.1.2.3"]),
    ctx=st.none() | st.integers(1, 1 << 20),
)
def test_owned_flags_appear_once_and_extra_args_come_last(
    extra: tuple[str, ...], port: int, host: str, ctx: int | None
) -> None:
    args = launch(llama_spec(host=host, port=port, ctx=ctx, extra_args=extra)).args
    assert args[len(args) - len(extra) :] == extra
    for owned in ("-m", "--host", "--port", "-c", "-md", "-ctk"):
        assert args.count(owned) <= 1
    assert args[args.index("--port") + 1] == str(port)
    assert args[args.index("--host") + 1] == ("127.0.0.1" if host == "localhost" else host)


# ---- environment (checklist 43) ------------------------------------------------------------


def test_env_is_cleared_and_path_and_home_are_the_servers_own() -> None:
    parent = {"SECRET": "x", "LD_PRELOAD": "/evil.so", "HOME": "/root", "PATH": "/root/bin"}
    built = launch(llama_spec(), parent_env=parent)
    assert built.env == (("PATH", DEFAULT_PATH), ("HOME", str(built.cwd)))
    assert DEFAULT_PATH == "/usr/local/bin:/usr/bin:/bin"


def test_the_callers_path_wins_over_the_default() -> None:
    env = launch_env((), ("HOME", "PATH"), {"PATH": "/opt/bin", "HOME": "/home/u", "USER": "u"})
    assert dict(env) == {"PATH": "/opt/bin", "HOME": "/home/u"}


def test_config_env_sets_path_and_passthrough_wins_over_it() -> None:
    assert dict(launch_env((("PATH", "/cfg/bin"),), (), {"PATH": "/p"})) == {"PATH": "/cfg/bin"}
    env = launch_env((("PATH", "/cfg/bin"), ("A", "1")), ("PATH",), {"PATH": "/p"})
    assert env == (("PATH", "/p"), ("A", "1"))


def test_llama_arg_variables_are_never_passed() -> None:
    env = launch_env(
        (("LLAMA_ARG_HOST", "0.0.0.0"), ("KEEP", "1")),
        ("LLAMA_ARG_PORT", "HOME"),
        {"LLAMA_ARG_PORT": "1", "HOME": "/h"},
    )
    assert dict(env) == {"PATH": DEFAULT_PATH, "KEEP": "1", "HOME": "/h"}


def test_launch_environ_is_a_mapping_of_the_env() -> None:
    built = build_launch(
        llama_spec(),
        QWEN,
        None,
        program=PROGRAM,
        cwd=CWD,
        env=[("OMP_NUM_THREADS", "4")],
        passthrough=["HOME"],
        parent_env={"HOME": "/home/llm", "PATH": "/usr/bin"},
    )
    assert built.environ == {"PATH": DEFAULT_PATH, "OMP_NUM_THREADS": "4", "HOME": "/home/llm"}


NAMES = st.sampled_from(["PATH", "HOME", "LANG", "LLAMA_ARG_MODEL", "LLAMA_ARG_HOST", "TMPDIR"])


@given(
    config=st.lists(st.tuples(NAMES, PLAIN), max_size=4),
    passthrough=st.lists(NAMES, max_size=4),
    parent=st.dictionaries(NAMES, PLAIN, max_size=6),
)
def test_env_precedence_property(
    config: list[tuple[str, str]], passthrough: list[str], parent: dict[str, str]
) -> None:
    env = dict(launch_env(config, passthrough, parent))
    assert not any(name.startswith("LLAMA_ARG_") for name in env)
    for name, value in env.items():
        if name in passthrough and name in parent:
            assert value == parent[name]
        elif name in dict(config):
            assert value == dict(config)[name]
        else:
            assert (name, value) == ("PATH", DEFAULT_PATH)
    assert "PATH" in env
