"""What to execute for a managed server: program, argv, directory and environment (pure).

`build_launch` turns a validated spec and its verified model into a `Launch`; spawning it is
another module's job. The argv uses the real servers' own flags (llama-server's ``-m``,
``-c``, ``-ctk``/``-ctv``, ``-md``; mlx_lm.server's ``--model``), not the original's
launcher-script dialect. llama-server reads ``LLAMA_ARG_*`` environment variables as flags,
so none reaches it from our environment (`launch_env`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import assert_never

import attrs

from .._config.spec import InferenceSpec
from .._errors import AdmissionRefused, InvalidConfig, Unsupported
from .._flavor import InferFlavor
from .._models.manifest import ResolvedModel

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""PATH of a managed server unless the config's env or a passed-through PATH replaces it."""

SCRUBBED_ENV_PREFIX = "LLAMA_ARG_"
"""Variables with this prefix are never handed to a server: llama-server reads them as flags."""


@attrs.frozen
class Launch:
    """One process to start: never through a shell.

    Attributes:
        program: The executable.
        args: Arguments after the program name.
        cwd: Working directory (the instance directory).
        env: The complete environment, in order, as ``(name, value)`` pairs.
        private_dirs: Directories to create for the server (mlx-lm's Hugging Face cache).
        pass_fds: Descriptors the server inherits at the same numbers (the verified model
            files, named in ``args`` as ``/proc/self/fd/N``; see `pin_launch`).
    """

    program: Path
    args: tuple[str, ...]
    cwd: Path
    env: tuple[tuple[str, str], ...]
    private_dirs: tuple[Path, ...] = ()
    """Directories under ``cwd`` that must exist, owned by the server's user, before it starts."""
    pass_fds: tuple[int, ...] = ()

    @property
    def argv(self) -> tuple[str, ...]:
        """The program followed by its arguments."""
        return (str(self.program), *self.args)

    @property
    def environ(self) -> dict[str, str]:
        """The environment as a mapping, for a process-spawning call."""
        return dict(self.env)


def check_format(flavor: InferFlavor, model: ResolvedModel) -> None:
    """Refuse a model the flavor cannot load.

    llama.cpp loads gguf; mlx-lm loads mlx or safetensors; a managed Ollama loads only
    models registered in its own format.

    Raises:
        AdmissionRefused: ``"infer.llamacpp cannot load a mlx model (NAME)"``.
    """
    if model.format not in flavor.loadable_formats:
        raise AdmissionRefused(
            f"{flavor.id} cannot load a {model.format.value} model ({model.name})"
        )


def build_launch(
    spec: InferenceSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    *,
    program: Path,
    cwd: Path,
    env: Sequence[tuple[str, str]],
    passthrough: Sequence[str],
    parent_env: Mapping[str, str],
    mmproj: ResolvedModel | None = None,
    lora: Sequence[ResolvedModel] = (),
) -> Launch:
    """Build the launch of a managed llama-server or mlx_lm.server.

    llama.cpp: ``-m <first shard> --host IP --port P [-c N] [-ctk Q -ctv Q] [-md <draft
    first shard>] [--mmproj <projector file>] [--lora <adapter file>]...
    [--api-key-file PATH] *extra_args``. mlx-lm: ``--model <root dir> --host IP --port P
    [--adapter-path <adapter dir>] *extra_args`` (mlx_lm.server has no context-size or
    KV-cache flag, so ``serve.ctx`` and ``serve.kv_quant`` are not passed to it). An IPv6
    host is passed without brackets.

    The environment starts empty, gets ``PATH=/usr/local/bin:/usr/bin:/bin`` and
    ``HOME=cwd`` (the instance directory, never the supervisor's home), then ``env``,
    then each ``passthrough`` name set in ``parent_env`` (so a caller's PATH wins); names
    starting with ``LLAMA_ARG_`` are dropped from every source.

    Args:
        spec: The instance's spec; validated again here.
        model: The verified model named by ``spec.model``.
        draft: The verified draft named by ``spec.serve.draft_model``, or None without one.
        mmproj: The verified projector named by ``spec.serve.mmproj`` (llama.cpp).
        lora: The verified adapters named by ``spec.serve.lora``, in order.
        program: The server executable.
        cwd: The instance directory.
        env: Variables the config sets.
        passthrough: Names copied from ``parent_env`` when set there.
        parent_env: The supervisor's own environment.

    Raises:
        InvalidConfig: the spec is invalid, or ``draft``, ``mmproj`` or ``lora`` do not
            match the spec's names, or a model path is not absolute.
        AdmissionRefused: a model (or the draft) is in a format the flavor cannot load, or
            has no shards.
        Unsupported: the flavor is Ollama, which inferactors never starts.
    """
    spec.validate()
    check_format(spec.runtime, model)
    adapters = _matching_extras(spec, mmproj, lora)
    match spec.runtime:
        case InferFlavor.LLAMACPP:
            args = (*_llamacpp_args(spec, model, draft), *adapters)
        case InferFlavor.MLX_LM:
            _refuse_draft(spec, draft)
            args = ("--model", _absolute(model, model.root), *_bind_args(spec), *adapters)
        case InferFlavor.OLLAMA:
            raise Unsupported(f"{spec.runtime.id} is not a process inferactors starts")
        case unreachable:
            assert_never(unreachable)
    environment = launch_env(env, passthrough, parent_env, home=cwd)
    if spec.runtime is InferFlavor.MLX_LM:
        return _offline_mlx(Launch(program, (*args, *spec.serve.extra_args), cwd, environment))
    return Launch(program, (*args, *spec.serve.extra_args), cwd, environment)


def _offline_mlx(launch: Launch) -> Launch:
    """mlx_lm.server can never reach the Hugging Face Hub: ``HF_HUB_OFFLINE=1`` and a private,
    existing ``HF_HUB_CACHE`` in the instance directory override whatever the config says
    (without an existing cache its ``/v1/models`` answers an empty body).
    ``PYTHONUNBUFFERED=1``: its lines reach us as they are written, so a
    bind failure it hangs on is seen at once."""
    cache = launch.cwd / "hf-cache"
    forced = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    env = tuple((k, v) for k, v in launch.env if k not in forced) + tuple(forced.items())
    return attrs.evolve(launch, env=env, private_dirs=(cache,))


def launch_env(
    env: Sequence[tuple[str, str]],
    passthrough: Sequence[str],
    parent_env: Mapping[str, str],
    *,
    home: Path | None = None,
) -> tuple[tuple[str, str], ...]:
    """The cleared environment of a server: default PATH and ``HOME=home`` (when given),
    then ``env``, then each ``passthrough`` name present in ``parent_env``; ``LLAMA_ARG_*``
    names are dropped. Later sources replace earlier values, so the supervisor's own PATH
    and HOME (root's, perhaps) reach a server only when the config names them; a
    ``LLAMA_ARG_*`` variable would act as a flag, so it is never passed.
    """
    result = {"PATH": DEFAULT_PATH}
    if home is not None:
        result["HOME"] = str(home)
    result.update(env)
    result.update((name, parent_env[name]) for name in passthrough if name in parent_env)
    return tuple(
        (name, value) for name, value in result.items() if not name.startswith(SCRUBBED_ENV_PREFIX)
    )


def _llamacpp_args(
    spec: InferenceSpec, model: ResolvedModel, draft: ResolvedModel | None
) -> tuple[str, ...]:
    args = ["-m", _first_shard(model), *_bind_args(spec)]
    if spec.serve.ctx is not None:
        args += ["-c", str(spec.serve.ctx)]
    if spec.serve.kv_quant is not None:
        args += ["-ctk", spec.serve.kv_quant, "-ctv", spec.serve.kv_quant]
    if spec.serve.draft_model is not None:
        if draft is None:
            raise InvalidConfig(
                f"serve.draft_model names {spec.serve.draft_model} but no resolved draft "
                "model was given"
            )
        check_format(spec.runtime, draft)
        args += ["-md", _first_shard(draft)]
    else:
        _refuse_draft(spec, draft)
    return tuple(args)


def _matching_extras(
    spec: InferenceSpec, mmproj: ResolvedModel | None, lora: Sequence[ResolvedModel]
) -> tuple[str, ...]:
    """The projector, adapter and API key arguments; each model must be the one the spec
    names. llama.cpp reads one file each (``--mmproj``, ``--lora``), mlx_lm.server an
    adapter directory (``--adapter-path``)."""
    serve = spec.serve
    if (mmproj.name if mmproj else None) != serve.mmproj:
        raise InvalidConfig(f"serve.mmproj is {serve.mmproj} but the projector given is {mmproj}")
    if tuple(m.name for m in lora) != serve.lora:
        raise InvalidConfig(f"serve.lora names {serve.lora} but other adapters were given")
    args: list[str] = []
    if mmproj is not None:
        check_format(spec.runtime, mmproj)
        args += ["--mmproj", _first_shard(mmproj)]
    for adapter in lora:
        check_format(spec.runtime, adapter)
        if spec.runtime is InferFlavor.MLX_LM:
            args += ["--adapter-path", _absolute(adapter, adapter.root)]
        else:
            args += ["--lora", _first_shard(adapter)]
    if serve.api_key_file is not None:
        args += ["--api-key-file", serve.api_key_file]
    return tuple(args)


def _refuse_draft(spec: InferenceSpec, draft: ResolvedModel | None) -> None:
    if draft is not None:
        raise InvalidConfig(
            f"a draft model ({draft.name}) was given but serve.draft_model is not set"
        )


def _bind_args(spec: InferenceSpec) -> tuple[str, ...]:
    return ("--host", str(spec.bind_ip()), "--port", str(spec.port()))


def _first_shard(model: ResolvedModel) -> str:
    if not model.shards:
        raise AdmissionRefused(f"model {model.name} has no shards")
    return _absolute(model, model.shards[0])


def _absolute(model: ResolvedModel, path: Path) -> str:
    if not path.is_absolute():
        raise InvalidConfig(f"model {model.name}: path {path} is not absolute")
    return str(path)
