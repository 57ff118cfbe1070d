"""Trust anchors in the run file (``[managed] trust_anchors``) and an instance's
``signed_by``: loaded with paths resolved against the run file, and every mistake refused
naming its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferactors import InvalidConfig
from inferactors._config.convert import run_config_from_toml

HEAD = """
[managed]
registry = "models.json"
data_root = "state"
serve_programs = { "infer.llamacpp" = "/usr/local/bin/llama-server" }
"""
INSTANCE = """
[[instances]]
mode = "{mode}"
role = "chat"
runtime = "{runtime}"
model = "tiny"
signed_by = {signed_by}
"""


def _run_file(
    anchors: str,
    *,
    signed_by: str = '["ops"]',
    mode: str = "managed",
    runtime: str = "infer.llamacpp",
) -> str:
    instance = INSTANCE.format(mode=mode, runtime=runtime, signed_by=signed_by)
    return HEAD + anchors + instance


def test_anchors_load_with_paths_from_the_run_files_folder(tmp_path: Path) -> None:
    text = _run_file(
        'trust_anchors = [{ name = "ops", public_key = "keys/ops.pub" },\n'
        '                 { name = "corp", certificate = "/etc/pki/corp.pem" }]\n',
        signed_by='["corp", "ops"]',
    )

    config = run_config_from_toml(text, tmp_path)

    assert config.managed is not None
    ops, corp = config.managed.trust_anchors
    assert (ops.name, ops.kind, ops.path) == ("ops", "public_key", tmp_path / "keys/ops.pub")
    assert (corp.kind, corp.path) == ("certificate", Path("/etc/pki/corp.pem"))
    assert config.instances[0].spec.signed_by == ("corp", "ops")
    assert config.managed.managed_config(config.instances[0].spec.runtime).trust_anchors == (
        ops,
        corp,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _run_file('trust_anchors = [{ name = "ops" }]\n'),
            "$.managed.trust_anchors[0]: name exactly one of public_key and certificate",
        ),
        (
            _run_file('trust_anchors = [{ name = "ops", public_key = "a", certificate = "b" }]\n'),
            "$.managed.trust_anchors[0]: name exactly one of public_key and certificate",
        ),
        (
            _run_file('trust_anchors = [{ name = "a b", public_key = "a" }]\n'),
            "$.managed.trust_anchors[0].name must be a plain token",
        ),
        (
            _run_file(
                'trust_anchors = [{ name = "ops", public_key = "a" },'
                ' { name = "ops", public_key = "b" }]\n'
            ),
            "$.managed.trust_anchors[1].name: 'ops' names two trust anchors",
        ),
        (
            _run_file('trust_anchors = [{ name = "ops", public_key = "a", key = "b" }]\n'),
            "key",
        ),
        (
            _run_file(
                'trust_anchors = [{ name = "ops", public_key = "a" }]\n', signed_by='["corp"]'
            ),
            "$.instances[0].signed_by[0]: no trust anchor named 'corp' in "
            "$.managed.trust_anchors (configured: ops)",
        ),
        (
            _run_file("", signed_by='["ops"]'),
            "no trust anchor named 'ops' in $.managed.trust_anchors (configured: none)",
        ),
        (
            _run_file('trust_anchors = [{ name = "ops", public_key = "a" }]\n', mode="adopted"),
            "$.instances[0].signed_by: an adopted server's model is not pinned",
        ),
        (
            _run_file(
                'trust_anchors = [{ name = "ops", public_key = "a" }]\n', runtime="infer.ollama"
            ),
            "$.instances[0].signed_by: Ollama keeps an ollama model's files",
        ),
        (
            _run_file(
                'trust_anchors = [{ name = "ops", public_key = "a" }]\n', signed_by='["o p"]'
            ),
            "$.instances[0].signed_by[0] must be a plain token",
        ),
    ],
)
def test_trust_mistakes_are_refused_naming_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(InvalidConfig) as caught:
        run_config_from_toml(text, tmp_path)
    assert message in str(caught.value)
