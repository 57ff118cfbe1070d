"""The ``serve.extra_args`` allowlist as data: each flag, its flavors and its value rule
(pure; the walk that applies it is ``allowlist.py``).

Every spelling was checked against the ``--help`` of the pinned servers
(``tests/policy/help_texts/``); a spelling some builds lack (``--mlock``, ``--no-mmap``) is
listed, and admission refuses it when the binary at hand does not list it
(``_policy/help_flags.py``). Flags that take a path or a secret are never accepted raw:
`TYPED_FIELDS` names the spec field to use instead. Host, port, model, draft, context
size and KV cache type are set by inferactors itself and are on no list.
"""

from __future__ import annotations

import enum

import attrs

from .._flavor import InferFlavor

LLAMA = (InferFlavor.LLAMACPP,)
MLX = (InferFlavor.MLX_LM,)
BOTH = (InferFlavor.LLAMACPP, InferFlavor.MLX_LM)


class ValueKind(enum.Enum):
    """What follows a flag; the value is the README's wording."""

    NONE = "no value"
    PLAIN = "a plain word or number"
    INT = "an integer"
    NUMBER = "a decimal number"
    CHOICE = "one of"
    NAME = "a name (letters, digits, ._+:/-; up to 128)"
    TEMPLATE = "a template name or an inline template (up to 64 KiB)"
    JSON_OBJECT = "a JSON object (up to 64 KiB)"


@attrs.frozen
class FlagRule:
    """One allowed flag: its ``spellings`` (all accepted), the ``flavors`` that take it and
    what value follows (``choices`` for `ValueKind.CHOICE`); ``example`` is a good value."""

    spellings: tuple[str, ...]
    flavors: tuple[InferFlavor, ...]
    kind: ValueKind = ValueKind.NONE
    choices: tuple[str, ...] = ()
    example: str | None = None

    @property
    def arity(self) -> int:
        """How many values follow the flag (0 or 1)."""
        return 0 if self.kind is ValueKind.NONE else 1

    @property
    def rule_text(self) -> str:
        """The value rule as the README states it."""
        if self.kind is ValueKind.CHOICE:
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        return str(self.kind.value)


@attrs.frozen
class TypedField:
    """A flag refused as a raw argument because it takes a path or a secret: ``field``
    (``serve.mmproj``) says what to use instead, or ``None`` when nothing replaces it."""

    spellings: tuple[str, ...]
    flavors: tuple[InferFlavor, ...]
    field: str | None
    takes: str


def _rule(*spellings: str, on: tuple[InferFlavor, ...] = LLAMA, **kw: object) -> FlagRule:
    return FlagRule(spellings, on, **kw)  # type: ignore[arg-type]


_N = ValueKind.INT
_F = ValueKind.NUMBER
_C = ValueKind.CHOICE

FLAG_RULES: tuple[FlagRule, ...] = (
    # llama-server: performance and slots.
    _rule("-t", "--threads", kind=_N, example="4"),
    _rule("-tb", "--threads-batch", kind=_N, example="4"),
    _rule("-b", "--batch-size", kind=_N, example="2048"),
    _rule("-ub", "--ubatch-size", kind=_N, example="512"),
    _rule("-np", "--parallel", kind=_N, example="4"),
    _rule("-ngl", "--gpu-layers", "--n-gpu-layers", kind=_N, example="99"),
    _rule("-fa", "--flash-attn", kind=_C, choices=("on", "off", "auto"), example="auto"),
    _rule("-cb", "--cont-batching"),
    _rule("-nocb", "--no-cont-batching"),
    _rule("--mlock"),
    _rule("--mmap"),
    _rule("--no-mmap"),
    _rule(
        "-lm",
        "--load-mode",
        kind=_C,
        choices=("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
        example="mlock",
    ),
    _rule("--metrics"),
    _rule("--slots"),
    _rule("--no-slots"),
    _rule("--no-webui"),
    # llama-server: what it serves and how it names it.
    _rule("-a", "--alias", kind=ValueKind.NAME, example="chat-model"),
    _rule("--jinja"),
    _rule("--no-jinja"),
    _rule("--chat-template", on=BOTH, kind=ValueKind.TEMPLATE, example="chatml"),
    _rule(
        "--chat-template-kwargs", kind=ValueKind.JSON_OBJECT, example='{"enable_thinking":false}'
    ),
    _rule("--embedding", "--embeddings"),
    _rule("--rerank", "--reranking"),
    _rule("--pooling", kind=_C, choices=("none", "mean", "cls", "last", "rank"), example="mean"),
    _rule(
        "--reasoning-format",
        kind=_C,
        choices=("none", "deepseek", "deepseek-legacy", "auto"),
        example="auto",
    ),
    _rule("--reasoning-budget", kind=_N, example="-1"),
    # llama-server: logging.
    _rule("-v", "--verbose", "--log-verbose"),
    _rule("-lv", "--verbosity", "--log-verbosity", kind=_N, example="3"),
    # Sampling defaults.
    _rule("--temp", on=BOTH, kind=_F, example="0.7"),
    _rule("--temperature", kind=_F, example="0.7"),
    _rule("--top-k", on=BOTH, kind=_N, example="40"),
    _rule("--top-p", on=BOTH, kind=_F, example="0.95"),
    _rule("-n", "--predict", "--n-predict", kind=_N, example="256"),
    _rule("--repeat-penalty", kind=_F, example="1.1"),
    _rule("-s", "--seed", kind=_N, example="42"),
    # mlx_lm.server.
    _rule("--max-tokens", on=MLX, kind=_N, example="512"),
    _rule("--use-default-chat-template", on=MLX),
    _rule(
        "--chat-template-args",
        on=MLX,
        kind=ValueKind.JSON_OBJECT,
        example='{"enable_thinking":false}',
    ),
    _rule(
        "--log-level",
        on=MLX,
        kind=_C,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        example="DEBUG",
    ),
    _rule("--decode-concurrency", on=MLX, kind=_N, example="4"),
    _rule("--prompt-concurrency", on=MLX, kind=_N, example="2"),
    _rule("--prefill-step-size", on=MLX, kind=_N, example="2048"),
    _rule("--prompt-cache-size", on=MLX, kind=_N, example="4"),
)
"""Every allowed flag (README "The extra_args allowlist" is generated from this)."""

TYPED_FIELDS: tuple[TypedField, ...] = (
    TypedField(("-m", "--model"), BOTH, "model", "a path"),
    TypedField(
        ("-md", "--model-draft", "--spec-draft-model"), LLAMA, "serve.draft_model", "a path"
    ),
    TypedField(("-mm", "--mmproj"), LLAMA, "serve.mmproj", "a path"),
    TypedField(("--lora",), LLAMA, "serve.lora", "a path"),
    TypedField(("--adapter-path",), MLX, "serve.lora", "a path"),
    TypedField(("--api-key",), LLAMA, "serve.api_key_file", "a secret"),
    TypedField(("--api-key-file",), LLAMA, "serve.api_key_file", "a path to a secret"),
    TypedField(("--hf-token", "-hft"), LLAMA, None, "a secret"),
    TypedField(
        ("--chat-template-file",), LLAMA, "--chat-template with the template inline", "a path"
    ),
    TypedField(
        ("--lora-scaled", "--control-vector", "--control-vector-scaled"), LLAMA, None, "a path"
    ),
    TypedField(
        ("--log-file", "--slot-save-path", "--path", "--media-path", "--models-dir"),
        LLAMA,
        None,
        "a path",
    ),
    TypedField(("--ssl-key-file", "--ssl-cert-file"), LLAMA, None, "a path"),
    TypedField(
        ("--grammar-file", "-jf", "--json-schema-file", "--models-preset"), LLAMA, None, "a path"
    ),
    TypedField(("--trust-remote-code",), MLX, None, "permission to run the model's code"),
)
"""Flags refused as raw arguments, with the field that replaces them."""


def typed_field(flavor: InferFlavor, flag: str) -> TypedField | None:
    """The typed-field entry for ``flag`` on ``flavor``, if it is one."""
    for entry in TYPED_FIELDS:
        if flavor in entry.flavors and flag in entry.spellings:
            return entry
    return None


def rules_of(flavor: InferFlavor) -> dict[str, FlagRule]:
    """Each allowed spelling for ``flavor`` and its rule."""
    return {s: rule for rule in FLAG_RULES if flavor in rule.flavors for s in rule.spellings}


def allowlist_table() -> str:
    """The allowlist as a Markdown table (flag, flavors, value), the README's section."""
    lines = ["| flag | flavors | value |", "|---|---|---|"]
    for rule in FLAG_RULES:
        lines.append(
            f"| {_spellings(rule.spellings)} | {_flavors(rule.flavors)} | {rule.rule_text} |"
        )
    for entry in TYPED_FIELDS:
        instead = f"use `{entry.field}`" if entry.field else "not accepted"
        lines.append(
            f"| {_spellings(entry.spellings)} | {_flavors(entry.flavors)} | "
            f"refused ({entry.takes}): {instead} |"
        )
    return "\n".join(lines)


def _spellings(spellings: tuple[str, ...]) -> str:
    return ", ".join(f"`{s}`" for s in spellings)


def _flavors(flavors: tuple[InferFlavor, ...]) -> str:
    names = {InferFlavor.LLAMACPP: "llama-server", InferFlavor.MLX_LM: "mlx_lm.server"}
    return ", ".join(names[f] for f in flavors)
