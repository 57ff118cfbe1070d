"""Every file under ``contrib/`` parses, and what it runs exists (issue 10 items 8 and 9).

The systemd unit is checked by ``systemd-analyze verify`` (with ``ExecStart`` pointed at
this environment's ``inferactors``: verify refuses a missing executable) and read with
systemd's own syntax rules for the keys the notify protocol and the hardening need. The
Kubernetes manifest is parsed with PyYAML: its ConfigMap's run file loads, the container's
command is ``inferactors run`` on the file the ConfigMap mounts, and each probe's exec
command is a real ``inferactors probe`` invocation of an endpoint the control app serves.
"""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.readme_blocks_support import readme_blocks, served_paths, shell_commands
from inferactors import load_run_config
from inferactors._cli.main import build_parser
from inferactors._cli.probe import probe
from inferactors._cli.run import run_config
from inferactors._service.lifecycle import EXTEND_EVERY_S, EXTEND_S

ROOT = Path(__file__).resolve().parents[2]
CONTRIB = ROOT / "contrib"
UNIT = CONTRIB / "systemd" / "inferactors.service"
UNIT_RUN_FILE = CONTRIB / "systemd" / "config.toml"
VENV_INFERACTORS = "/opt/inferactors/bin/inferactors"
DEPLOYMENT = CONTRIB / "kubernetes" / "deployment.yaml"
INFERACTORS = Path(sys.executable).with_name("inferactors")


def test_every_contrib_file_is_checked_here() -> None:
    files = sorted(p.relative_to(CONTRIB) for p in CONTRIB.rglob("*") if p.is_file())
    assert files == [
        Path("kubernetes/deployment.yaml"),
        Path("systemd/config.toml"),
        Path("systemd/inferactors.service"),
    ]


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(
        strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";")
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_is_a_hardened_notify_service() -> None:
    service = _unit()["Service"]
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "ExecStart": f"{VENV_INFERACTORS} run /etc/inferactors/config.toml",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "KillMode": "mixed",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "StateDirectory": "inferactors",
        "Restart": "on-failure",
        "RestartPreventExitStatus": "2 78",
        "Delegate": "yes",
        "StateDirectoryMode": "0711",
    }
    assert {key: service.get(key) for key in expected} == expected
    for key in ("WatchdogSec", "RestartSec", "ProtectHome", "TimeoutStopSec"):
        assert service.get(key), key
    assert _seconds(service["TimeoutStopSec"]) > 10.0  # the CLI's stop grace for servers


def test_the_start_timeout_outlasts_the_extensions_sent_while_models_load() -> None:
    start_s = _seconds(_unit()["Service"]["TimeoutStartSec"])
    # the first EXTEND_TIMEOUT_USEC comes at once; each later one before the last runs out
    assert EXTEND_EVERY_S < EXTEND_S <= start_s


def _seconds(value: str) -> float:
    assert value.endswith("s"), value
    return float(value[:-1])


def test_the_units_exec_start_is_a_real_run_command() -> None:
    argv = shlex.split(_unit()["Service"]["ExecStart"])
    args = build_parser().parse_args(argv[1:])
    assert args.func is run_config
    assert args.config == Path("/etc/inferactors/config.toml")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    unit = tmp_path / "inferactors.service"
    unit.write_text(UNIT.read_text().replace(VENV_INFERACTORS, str(INFERACTORS)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert str(unit) not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_units_run_file_writes_only_to_its_state_directory() -> None:
    """``contrib/systemd/config.toml`` (installed as the file ExecStart names) loads, keeps
    its state and registry in the unit's ``StateDirectory`` (the one place the unit may
    write), and runs its servers as the service account the README creates."""
    service = _unit()["Service"]
    config = load_run_config(UNIT_RUN_FILE)
    assert config.managed is not None
    state = Path("/var/lib") / service["StateDirectory"]
    assert config.managed.data_root == state
    assert config.managed.registry.parent == state
    assert config.managed.run_as == "inferactors"
    assert [entry.spec.role for entry in config.instances] == ["chat"]


def _readme_install() -> list[list[str]]:
    (block,) = [b for b in readme_blocks() if b.lang == "sh" and "useradd" in b.text]
    return shell_commands(block.text)


def test_the_readme_installs_what_the_unit_runs() -> None:
    """The README's install steps make the venv whose ``inferactors`` ExecStart names,
    the account the run file's ``run_as`` names, the run file at the path ExecStart reads
    (from ``contrib/systemd/config.toml``), and register a model into its registry; each
    ``inferactors`` step parses, and the unit file's own comment gives the same steps."""
    steps = _readme_install()
    argv = shlex.split(_unit()["Service"]["ExecStart"])
    venv = Path(argv[0]).parents[1]
    assert ["python3", "-m", "venv", str(venv)] in steps
    assert [str(venv / "bin" / "pip"), "install", "."] in steps
    (useradd,) = [words for words in steps if words[0] == "useradd"]
    assert useradd[-1] == load_run_config(UNIT_RUN_FILE).managed.run_as  # type: ignore[union-attr]
    installed = [words for words in steps if words[0] == "install" and words[-1] == argv[-1]]
    assert installed
    assert installed[0][-2] == str(UNIT_RUN_FILE.relative_to(ROOT))
    ours = [words for words in steps if words[0] in ("inferactors", str(venv / "bin/inferactors"))]
    assert len(ours) >= 3
    for words in ours:
        build_parser().parse_args(words[1:])
    (add_tiny,) = [words for words in ours if words[1:3] == ["models", "add-tiny"]]
    registry = load_run_config(UNIT_RUN_FILE).managed.registry  # type: ignore[union-attr]
    assert add_tiny[add_tiny.index("--registry") + 1] == str(registry)
    comment = UNIT.read_text()
    for words in steps:
        if words[0] in ("python3", "useradd", "install") and words[-1] != "/var/lib/inferactors":
            assert shlex.join(words[1:]) in comment, words


def _manifests() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(DEPLOYMENT.read_text())}


def _container() -> dict[str, Any]:
    containers = _manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def test_the_config_map_holds_a_run_file_that_loads(tmp_path: Path) -> None:
    run_file = tmp_path / "config.toml"
    run_file.write_text(_manifests()["ConfigMap"]["data"]["config.toml"])
    config = load_run_config(run_file)
    assert [entry.spec.role for entry in config.instances] == ["chat"]
    assert config.managed is not None
    assert config.managed.data_root == Path("/var/lib/inferactors")


def test_the_container_runs_the_mounted_run_file() -> None:
    container = _container()
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = _manifests()["Deployment"]["spec"]["template"]["spec"]["volumes"]
    config_volume = next(v for v in volumes if "configMap" in v)
    assert config_volume["configMap"]["name"] == _manifests()["ConfigMap"]["metadata"]["name"]
    args = build_parser().parse_args(container["command"][1:])
    assert container["command"][0] == "inferactors"
    assert args.func is run_config
    assert args.config == Path(mounts[config_volume["name"]]) / "config.toml"


@pytest.mark.parametrize(
    ("probe_key", "endpoint"),
    [("startupProbe", "livez"), ("livenessProbe", "livez"), ("readinessProbe", "readyz")],
)
def test_each_probe_is_an_inferactors_probe_of_a_served_endpoint(
    probe_key: str, endpoint: str
) -> None:
    container = _container()
    command = container[probe_key]["exec"]["command"]
    assert command[0] == "inferactors"
    args = build_parser().parse_args(command[1:])
    assert args.func is probe
    assert args.endpoint == endpoint
    state = {m["mountPath"] for m in container["volumeMounts"] if m["name"] == "state"}
    assert {str(args.state_dir)} == state
    assert args.timeout < container[probe_key]["timeoutSeconds"]
    assert f"/{endpoint}" in served_paths()


def test_probe_says_plainly_when_no_supervisor_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(INFERACTORS), "probe", "readyz", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert f"no supervisor is running (no socket at {tmp_path}/control.sock)" in done.stderr
