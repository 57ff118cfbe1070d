"""What one inference instance should serve, and how it is checked (pure; no I/O).

An `InferenceSpec` names a role, a runtime flavor, an optional registry model and the
server's arguments. `InferenceSpec.validate` applies every rule, in the
order `InferenceSpec.validate` lists; each failure is `InvalidConfig` whose message begins
with the field path (``role``, ``serve.host``, ``serve.extra_args[3]``, ``memory.kv_budget_bytes``).
"""

from __future__ import annotations

import enum
import ipaddress
import re

import attrs

from .._errors import InvalidConfig, cut, shown
from .._flavor import InferFlavor
from .allowlist import check_extra_args, check_typed_fields
from .ollama_names import parse_ollama_name

MAX_MEMORY_BYTES = 1 << 42
"""Largest memory figure a spec may state: 4 TiB (equal is allowed)."""

OPENAI_V1 = "openai-v1"
"""The only API an inference spec may declare."""

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]*")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def valid_token(s: str, max_len: int) -> bool:
    """Whether ``s`` is a plain token: 1 to ``max_len`` characters, the first one from
    ``[A-Za-z0-9]``, the rest from ``[A-Za-z0-9._+:-]``.
    """
    return 0 < len(s) <= max_len and _TOKEN.fullmatch(s) is not None


class LatencyClass(enum.StrEnum):
    """How the instance is used: answering people (interactive) or jobs (batch)."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


@attrs.frozen
class MemoryFootprint:
    """Memory the instance holds while resident, in bytes (each at most 4 TiB)."""

    weights_bytes: int = 0
    kv_budget_bytes: int = 0


@attrs.frozen
class ServeArgs:
    """Arguments of the server process.

    Attributes:
        host: Bind address; None means 127.0.0.1, ``"localhost"`` maps to 127.0.0.1, and
            only loopback addresses are accepted.
        port: TCP port; None means the flavor's default port.
        ctx: Context size in tokens (llama.cpp ``-c``).
        kv_quant: KV cache type such as ``q8_0`` (llama.cpp ``-ctk``/``-ctv``).
        draft_model: Registry name of a draft model for speculative decoding (llama.cpp).
        extra_args: Further argv entries, each flag and value separate, from the allowlist.
        mmproj: Registry name of a multimodal projector (llama.cpp ``--mmproj``), verified
            and pinned like the model.
        lora: Registry names of LoRA adapters (llama.cpp ``--lora``, each; mlx_lm.server
            ``--adapter-path``, at most one), verified and pinned like the model.
        api_key_file: Absolute path of a file holding the server's API key (llama.cpp),
            readable by the ``run_as`` user only; read at admission, sent by our probes.
    """

    host: str | None = None
    port: int | None = None
    ctx: int | None = None
    kv_quant: str | None = None
    draft_model: str | None = None
    extra_args: tuple[str, ...] = ()
    mmproj: str | None = None
    lora: tuple[str, ...] = ()
    api_key_file: str | None = None


@attrs.frozen
class InferenceSpec:
    """One inference instance: what to serve, where, and with which arguments.

    Attributes:
        role: Plain token (1-64 chars) naming the instance's job, e.g. ``planner``.
        runtime: The server flavor that runs it.
        model: Registry model name (1-128 chars); required when the instance is managed.
            An Ollama instance may also name any model Ollama reads (``user/model``,
            ``hf.co/org/repo:Q4_K_M``), which is what an adopted one asks the daemon for.
        serve: Server arguments.
        memory: Resident footprint in bytes.
        excludes: Roles that must not be resident beside this one (``planner`` or
            ``role:planner``).
        latency_class: Interactive or batch (default batch).
        sticky: Keep the instance where it is (its KV cache is warm).
        api: The API it serves; only ``"openai-v1"``.
        signed_by: Trust anchor names (``[[managed.trust_anchors]]``): every model the
            server reads (model, draft, projector, adapters) must carry an OpenSSF Model
            Signing signature one of them verifies; empty: no signature is required.
    """

    role: str
    runtime: InferFlavor
    model: str | None = None
    serve: ServeArgs = ServeArgs()
    memory: MemoryFootprint = MemoryFootprint()
    excludes: tuple[str, ...] = ()
    latency_class: LatencyClass = LatencyClass.BATCH
    sticky: bool = False
    api: str = OPENAI_V1
    signed_by: tuple[str, ...] = ()

    def bind_ip(self) -> IPAddress:
        """The address the server binds: ``serve.host`` parsed, 127.0.0.1 when absent.

        Raises:
            InvalidConfig: ``serve.host`` is not an IP address or ``"localhost"``, carries
                an IPv6 scope, or is not loopback (wider binds are not supported).
        """
        host = self.serve.host
        if host is None or host == "localhost":
            return ipaddress.IPv4Address("127.0.0.1")
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise InvalidConfig(f'serve.host "{cut(host)}" is not an IP address') from None
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
            raise InvalidConfig(f'serve.host "{cut(host)}" must not carry an IPv6 scope')
        if not ip.is_loopback:
            raise InvalidConfig(
                f"serve.host {host} is not loopback: inferactors binds inference servers to "
                "loopback addresses only"
            )
        return ip

    def port(self) -> int:
        """The TCP port: ``serve.port``, or the flavor's default port when absent.

        Raises:
            InvalidConfig: ``serve.port`` is 0 or outside 1..65535.
        """
        port = self.serve.port
        if port is None:
            return self.runtime.default_port
        if port == 0:
            raise InvalidConfig("serve.port must not be 0")
        if not 0 < port <= 65535:
            raise InvalidConfig(f"serve.port {port} is outside 1..65535")
        return port

    def base_url(self) -> str:
        """``http://IP:PORT``, with an IPv6 address in brackets (``http://[::1]:8090``).

        Raises:
            InvalidConfig: as `bind_ip` and `port`.
        """
        ip = self.bind_ip()
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        return f"http://{host}:{self.port()}"

    def validate(self) -> None:
        """Check every rule, in the order below; the first one broken is raised.

        Order: role, model and draft names, host then port, ctx, kv_quant, draft flavor,
        extra_args allowlist, mmproj, lora and api_key_file, memory caps, excludes, api,
        signed_by (plain tokens; whether the run file has such anchors is `RunConfig`'s).

        Raises:
            InvalidConfig: the first rule broken; the message starts with the field path.
        """
        _check_token("role", self.role, 64)
        self._check_model()
        _check_token("serve.draft_model", self.serve.draft_model, 128)
        self.bind_ip()
        self.port()
        _check_ctx(self.serve.ctx)
        _check_kv_quant(self.serve.kv_quant)
        if self.serve.draft_model is not None and self.runtime is not InferFlavor.LLAMACPP:
            raise InvalidConfig(
                f"serve.draft_model: draft models are supported by "
                f"{InferFlavor.LLAMACPP.id} only, not {self.runtime.id}"
            )
        check_extra_args(self.runtime, self.serve.extra_args)
        check_typed_fields(
            self.runtime, self.serve.mmproj, self.serve.lora, self.serve.api_key_file
        )
        _check_memory("memory.weights_bytes", self.memory.weights_bytes)
        _check_memory("memory.kv_budget_bytes", self.memory.kv_budget_bytes)
        for index, exclude in enumerate(self.excludes):
            _check_token(f"excludes[{index}]", exclude, 64)
        if self.api != OPENAI_V1:
            raise InvalidConfig(f'api "{cut(self.api)}" is not supported; use "{OPENAI_V1}"')
        for index, anchor in enumerate(self.signed_by):
            _check_token(f"signed_by[{index}]", anchor, 64)

    def _check_model(self) -> None:
        """A plain token; for Ollama also any name Ollama reads (``user/model``,
        ``hf.co/org/repo:Q4_K_M``; `inferactors._config.ollama_names`)."""
        if self.runtime is not InferFlavor.OLLAMA or self.model is None:
            _check_token("model", self.model, 128)
        elif not valid_token(self.model, 128):
            parse_ollama_name(self.model, "model")


def _check_token(field: str, value: str | None, max_len: int) -> None:
    if value is not None and not valid_token(value, max_len):
        raise InvalidConfig(
            f"{field} must be a plain token (1-{max_len} chars: letters, digits and ._+:-, "
            f"starting with a letter or digit), got {shown(value)}"
        )


def _check_ctx(ctx: int | None) -> None:
    if ctx is not None and ctx <= 0:
        raise InvalidConfig(f"serve.ctx must be positive, got {ctx}")
    if ctx is not None and ctx > 0xFFFF_FFFF:
        raise InvalidConfig(f"serve.ctx {ctx} is too large")


def _check_kv_quant(kv_quant: str | None) -> None:
    if kv_quant is None:
        return
    if not valid_token(kv_quant, 16) or ":" in kv_quant or "+" in kv_quant:
        raise InvalidConfig(
            f"serve.kv_quant must be a plain token of at most 16 chars without ':' or '+' "
            f"(e.g. q8_0), got {shown(kv_quant)}"
        )


def _check_memory(field: str, value: int) -> None:
    if not 0 <= value <= MAX_MEMORY_BYTES:
        raise InvalidConfig(f"{field} must be between 0 and 4 TiB (1<<42 bytes), got {value}")
