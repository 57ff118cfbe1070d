"""Tests of the fake inference server: its argv and options (pure), its answers (pure), and
each fault flag against the real program running as a process (issue 3, "Real processes").

Every process runs in its own session; the `fakes` fixture kills each group and checks that
nothing is left. Loopback only (127.0.0.1 and 127.0.0.2).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import psutil
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from inferactors._policy.probe_parse import (
    Loading,
    Unhealthy,
    Up,
    classify_health,
    completion_body,
    parse_completion,
    parse_model_ids,
)
from inferactors.testing._fake_faults import (
    Die,
    FakeServerFaults,
    FakeServerOptions,
    Flavor,
    Hang,
    Reply,
    completion_fate,
    decide,
    parse_fake_server_args,
)
from inferactors.testing._fake_server import fake_server_argv, read_request_log
from proc_checks import group_members, is_gone

CHAT = "/v1/chat/completions"
LOADING_BODY = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


# --- helpers ---------------------------------------------------------------------------------


def eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll OS or HTTP state until ``predicate`` holds; fail after the (generous) timeout."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {predicate}"
        time.sleep(0.01)


def free_port_on(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@attrs.define(eq=False)
class Fake:
    """A running fake server and the files it writes."""

    process: subprocess.Popen[bytes]
    port: int
    dir: Path
    client: httpx.Client

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> httpx.Response:
        return self.client.get(self.url + path)

    def post(self, path: str, body: object, timeout_s: float = 5.0) -> httpx.Response:
        return self.client.post(self.url + path, json=body, timeout=timeout_s)

    def wait_listening(self) -> None:
        """Wait for the pid file, which the fake writes once it listens."""
        eventually(lambda: (self.dir / "pid").exists() or self.process.poll() is not None)
        assert self.process.poll() is None, f"fake exited: {self.stderr()}"
        assert (self.dir / "pid").read_text() == str(self.pid)

    def returncode(self, timeout_s: float = 10.0) -> int:
        return self.process.wait(timeout=timeout_s)

    def stdout(self) -> str:
        return (self.dir / "stdout").read_text()

    def stderr(self) -> str:
        return (self.dir / "stderr").read_text()


@attrs.define(eq=False)
class Fakes:
    """Starts fakes, each in its own session; `close` kills every group and checks it."""

    root: Path
    client: httpx.Client
    started: list[Fake] = attrs.Factory(list)

    def start(self, port: int, *, wait: bool = True, **options: Any) -> Fake:
        where = self.root / f"fake{len(self.started)}"
        where.mkdir()
        argv = fake_server_argv(
            port, request_log=where / "requests.jsonl", pid_file=where / "pid", **options
        )
        return self.spawn(argv, port, where, wait=wait)

    def spawn(self, argv: list[str], port: int, where: Path, *, wait: bool = True) -> Fake:
        with (where / "stdout").open("wb") as out, (where / "stderr").open("wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        fake = Fake(process, port, where, self.client)
        self.started.append(fake)
        if wait:
            fake.wait_listening()
        return fake

    def close(self) -> None:
        for fake in self.started:
            try:
                os.killpg(fake.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the whole group is already gone
            fake.process.wait(timeout=10)
        leaders = [fake.pid for fake in self.started]
        eventually(lambda: not any(group_members(pgid) for pgid in leaders))


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        started = Fakes(tmp_path, client)
        try:
            yield started
        finally:
            started.close()


# --- pure: options, argv, answers ------------------------------------------------------------

durations = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
names = st.text("abcxyz0123456789._/", min_size=1, max_size=12)
signals = st.sampled_from(sorted(signal.Signals.__members__)) | st.none()
ports = st.integers(min_value=1, max_value=65535)

fault_values = st.builds(
    FakeServerFaults,
    load_s=durations,
    load_forever=st.booleans(),
    dead_generator=st.booleans(),
    crash_after_s=durations | st.none(),
    exit_code=st.integers(min_value=0, max_value=255),
    crash_signal=signals,
    crash_on_completion=signals,
    ignore_sigterm=st.booleans(),
    hang_completions=st.booleans(),
    fail_completions_after=st.integers(min_value=0, max_value=99) | st.none(),
    extra_port=ports | st.none(),
    extra_host=st.sampled_from(["127.0.0.1", "127.0.0.2", "::1", "0.0.0.0"]),
    fork_child=st.booleans(),
    bind_delay_s=durations,
)


@given(
    faults=fault_values,
    port=ports,
    flavor=st.sampled_from(["llamacpp", "mlx"]),
    model=names,
    alias=names | st.none(),
    files=st.lists(names.map(Path) | st.none(), min_size=3, max_size=3),
)
def test_argv_parses_back_to_the_same_options(
    faults: FakeServerFaults,
    port: int,
    flavor: Flavor,
    model: str,
    alias: str | None,
    files: list[Path | None],
) -> None:
    assume(flavor == "mlx" or not faults.dead_generator)
    request_log, pid_file, child_pid_file = files
    argv = fake_server_argv(
        port,
        flavor=flavor,
        model=model,
        faults=faults,
        python="py",
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
    )
    assert argv[:3] == ["py", "-I", "-c"]
    expected = FakeServerOptions(
        port=port,
        flavor=flavor,
        model=model,
        alias=alias,
        request_log=request_log,
        pid_file=pid_file,
        child_pid_file=child_pid_file,
        faults=faults,
    )
    assert parse_fake_server_args(argv[4:]) == expected


def test_default_faults_add_no_flags() -> None:
    assert FakeServerFaults().args() == ()
    assert FakeServerFaults(load_s=0.5, ignore_sigterm=True).args() == (
        "--load-s",
        "0.5",
        "--ignore-sigterm",
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FakeServerFaults(load_s=-1.0), "load_s must be >= 0"),
        (lambda: FakeServerFaults(bind_delay_s=math.nan), "bind_delay_s must be >= 0"),
        (lambda: FakeServerFaults(crash_signal="SIGNOPE"), "unknown signal 'SIGNOPE'"),
        (lambda: FakeServerFaults(crash_on_completion="KILL"), "unknown signal 'KILL'"),
        (lambda: FakeServerFaults(extra_port=70000), "extra_port must be a TCP port"),
        (lambda: FakeServerFaults(exit_code=256), "exit_code"),
        (lambda: FakeServerFaults(fail_completions_after=-1), "fail_completions_after"),
        (lambda: fake_server_argv(0), "port must be a TCP port"),
        (
            lambda: fake_server_argv(8080, faults=FakeServerFaults(dead_generator=True)),
            "dead_generator is an mlx_lm.server fault",
        ),
    ],
)
def test_invalid_options_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_fake_server_args(["--port", "8080", "--crash-signal", "SIGNOPE"])
    assert exited.value.code == 2
    assert "unknown signal 'SIGNOPE'" in capsys.readouterr().err


def test_completion_faults_decide_each_completion() -> None:
    options = FakeServerOptions(port=8080, faults=FakeServerFaults(fail_completions_after=2))
    fates = [completion_fate(options, CHAT, number) for number in (1, 2, 3, 4)]
    assert [type(fate) for fate in fates] == [Reply, Reply, Hang, Hang]
    dying = attrs.evolve(options, faults=FakeServerFaults(crash_on_completion="SIGKILL"))
    assert completion_fate(dying, CHAT, 1) == Die("SIGKILL")


def test_llamacpp_answers_503_to_all_but_the_model_list_while_loading() -> None:
    options = FakeServerOptions(port=8080)
    for method, path in [("GET", "/health"), ("GET", "/props"), ("POST", CHAT), ("GET", "/")]:
        assert decide(options, "loading", method, path, b"") == Reply(503, LOADING_BODY)
    models = decide(options, "loading", "GET", "/v1/models?x=1", b"")
    assert isinstance(models, Reply)
    assert models.status == 200


# --- real processes: llama-server flavor ----------------------------------------------------


def test_llamacpp_loads_then_serves_like_llama_server(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(load_s=0.4), alias="tiny-chat")
    health = fake.get("/health")
    assert (health.status_code, health.json()) == (503, LOADING_BODY)
    assert classify_health(health.status_code, health.content) == Loading()
    models = fake.get("/v1/models")  # answers while loading, with meta null (FC-03)
    assert models.status_code == 200
    assert [(m["id"], m["meta"]) for m in models.json()["data"]] == [("tiny-chat", None)]
    assert fake.get("/props").status_code == 503
    assert fake.post(CHAT, completion_body(None)).status_code == 503

    eventually(lambda: fake.get("/health").status_code == 200)
    first_200 = read_request_log(fake.dir / "requests.jsonl")[-1]
    assert first_200.path == "/health"
    assert first_200.at_s >= 0.399, "answered 200 before its load of 0.4 s was over"
    models = fake.get("/v1/models")
    assert parse_model_ids(models.content) == ("tiny-chat",)
    assert models.json()["data"][0]["meta"]["n_vocab"] == 420
    props = fake.get("/props").json()
    assert (props["model_path"], props["model_alias"], props["build_info"]) == (
        "tiny.gguf",
        "tiny-chat",
        "b0-fake",
    )
    chat = fake.post(CHAT, completion_body(None))
    assert parse_completion(chat.status_code, chat.content) == (" and", "length")
    native = fake.post("/completion", {"prompt": "Hi", "n_predict": 1}).json()
    assert (native["content"], native["stop_type"]) == (" and", "limit")
    assert fake.get("/slots/nothing").status_code == 404
    assert f"listening on {fake.url} pid {fake.pid}" in fake.stdout()


def test_fc06_load_forever_answers_503_forever(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(load_forever=True))
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        assert fake.get("/health").status_code == 503
        time.sleep(0.05)
    assert fake.get("/v1/models").json()["data"][0]["meta"] is None


def test_bind_delay_refuses_connections_until_it_listens(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, wait=False, faults=FakeServerFaults(bind_delay_s=1.0))
    with pytest.raises(httpx.ConnectError):
        fake.get("/health")
    assert not (fake.dir / "pid").exists()
    fake.wait_listening()
    assert fake.get("/health").status_code == 200


# --- real processes: crashes and signals -----------------------------------------------------


def test_crash_after_exits_with_the_exit_code(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(crash_after_s=1.0, exit_code=3))
    assert fake.get("/health").status_code == 200
    assert fake.returncode() == 3
    assert "inferactors fake server: crash (exit status 3)" in fake.stderr()


@pytest.mark.parametrize("name", ["SIGABRT", "SIGKILL"])
def test_crash_after_dies_of_the_signal(fakes: Fakes, free_port: int, name: str) -> None:
    faults = FakeServerFaults(crash_after_s=0.2, crash_signal=name)
    fake = fakes.start(free_port, faults=faults)
    assert fake.returncode() == -signal.Signals[name]
    assert f"crash ({name})" in fake.stderr()


def test_fc08_dies_of_sigkill_on_its_first_completion(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(crash_on_completion="SIGKILL"))
    assert fake.get("/health").status_code == 200
    with pytest.raises(httpx.TransportError):
        fake.post(CHAT, completion_body(None))
    assert fake.returncode() == -signal.SIGKILL
    last = read_request_log(fake.dir / "requests.jsonl")[-1]
    assert (last.method, last.path, last.json()) == ("POST", CHAT, completion_body(None))


@pytest.mark.parametrize(("flavor", "status"), [("llamacpp", 0), ("mlx", -signal.SIGTERM)])
def test_sigterm_ends_it_like_the_real_server(
    fakes: Fakes, free_port: int, flavor: Flavor, status: int
) -> None:
    fake = fakes.start(free_port, flavor=flavor)
    fake.process.terminate()
    assert fake.returncode() == status


def test_fc11_ignores_sigterm_until_sigkill(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(ignore_sigterm=True))
    fake.process.terminate()
    time.sleep(0.3)
    assert fake.process.poll() is None
    assert fake.get("/health").status_code == 200
    fake.process.kill()
    assert fake.returncode() == -signal.SIGKILL


def test_port_in_use_exits_with_status_1(fakes: Fakes, free_port: int) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port))
        holder.listen()
        fake = fakes.start(free_port, wait=False)
        assert fake.returncode() == 1
    assert f"cannot listen on 127.0.0.1:{free_port}" in fake.stderr()


# --- real processes: completions that hang or are refused -------------------------------------


@pytest.mark.parametrize(
    ("flavor", "faults"),
    [
        ("llamacpp", FakeServerFaults(hang_completions=True)),  # FC-04
        ("mlx", FakeServerFaults(load_forever=True)),  # FC-07: health 200, generator never up
    ],
)
def test_fc04_fc07_health_fine_while_completions_hang(
    fakes: Fakes, free_port: int, flavor: Flavor, faults: FakeServerFaults
) -> None:
    fake = fakes.start(free_port, flavor=flavor, faults=faults)
    health = fake.get("/health")
    assert classify_health(health.status_code, health.content) == Up()
    with pytest.raises(httpx.ReadTimeout):
        fake.post(CHAT, completion_body(None), timeout_s=0.5)


def test_fail_completions_after_n_then_hang(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, faults=FakeServerFaults(fail_completions_after=2))
    for _ in range(2):
        assert fake.post(CHAT, completion_body(None)).status_code == 200
    with pytest.raises(httpx.ReadTimeout):
        fake.post(CHAT, completion_body(None), timeout_s=0.5)
    assert fake.get("/health").status_code == 200


def test_fc09_mlx_refuses_a_model_field_other_than_its_model(fakes: Fakes, free_port: int) -> None:
    model = "/models/tiny-mlx"
    fake = fakes.start(free_port, flavor="mlx", model=model)
    assert parse_model_ids(fake.get("/v1/models").content) == (model,)
    for body in (completion_body(None), completion_body(model)):
        reply = fake.post(CHAT, body)
        assert parse_completion(reply.status_code, reply.content) == (" and", "length")
    refused = fake.post(CHAT, completion_body("tiny-mlx"))
    assert refused.status_code == 404
    assert "tiny-mlx" in refused.json()["error"]
    assert (fake.get("/props").status_code, fake.get("/props").text) == (404, "Not Found")


def test_mlx_completion_during_the_load_waits_for_it(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port, flavor="mlx", faults=FakeServerFaults(load_s=0.5))
    assert fake.get("/health").status_code == 200  # mlx_lm.server: 200 while loading
    sent = time.monotonic()
    reply = fake.post(CHAT, completion_body(None))
    took_s = time.monotonic() - sent
    assert reply.status_code == 200
    arrived_s = read_request_log(fake.dir / "requests.jsonl")[-1].at_s
    assert took_s >= 0.5 - arrived_s - 0.001


def test_fc07_mlx_dead_generator(fakes: Fakes, free_port: int) -> None:
    faults = FakeServerFaults(load_s=0.2, dead_generator=True)
    fake = fakes.start(free_port, flavor="mlx", faults=faults)
    eventually(lambda: fake.get("/health").status_code == 503)
    health = fake.get("/health")
    assert health.json() == {"status": "unavailable"}
    assert isinstance(classify_health(health.status_code, health.content), Unhealthy)
    assert fake.get("/v1/models").json() == {"object": "list", "data": []}
    dead = fake.post(CHAT, completion_body(None))
    assert (dead.status_code, dead.json()) == (404, {"error": "generation thread died"})
    assert fake.process.poll() is None  # the process stays alive, as mlx-lm 0.32.2 does


# --- real processes: sockets, children, the request log, the module entry point --------------


def test_extra_port_listens_on_the_requested_host(fakes: Fakes, free_port: int) -> None:
    extra = free_port_on("127.0.0.2")
    faults = FakeServerFaults(extra_port=extra, extra_host="127.0.0.2")
    fake = fakes.start(free_port, faults=faults)
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(fake.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", free_port), ("127.0.0.2", extra)}
    assert fakes.client.get(f"http://127.0.0.2:{extra}/health").status_code == 200


def test_fork_child_stays_alive_in_the_same_group(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(
        free_port,
        faults=FakeServerFaults(fork_child=True),
        child_pid_file=fakes.root / "child.pid",
    )
    child = int((fakes.root / "child.pid").read_text())
    assert psutil.Process(child).ppid() == fake.pid
    assert os.getpgid(child) == os.getpgid(fake.pid) == fake.pid
    ports = {c.laddr.port for c in psutil.Process(child).net_connections(kind="tcp")}
    assert free_port in ports  # it holds the listening socket it inherited
    fake.process.kill()
    assert fake.returncode() == -signal.SIGKILL
    time.sleep(0.2)
    assert not is_gone(child)  # orphaned, still running
    os.killpg(fake.pid, signal.SIGKILL)
    eventually(lambda: is_gone(child))


def test_request_log_has_one_line_per_request(fakes: Fakes, free_port: int) -> None:
    fake = fakes.start(free_port)
    fake.get("/health")
    fake.post(CHAT, completion_body("m"))
    fake.get("/v1/models?limit=1")
    log = read_request_log(fake.dir / "requests.jsonl")
    assert [(r.method, r.path) for r in log] == [
        ("GET", "/health"),
        ("POST", CHAT),
        ("GET", "/v1/models?limit=1"),
    ]
    assert [r.json() for r in log] == [None, completion_body("m"), None]
    assert [r.at_s for r in log] == sorted(r.at_s for r in log)


def test_module_entry_point_runs_the_same_program(
    fakes: Fakes, free_port: int, tmp_path: Path
) -> None:
    where = tmp_path / "module"
    where.mkdir()
    argv = [sys.executable, "-m", "inferactors.testing._fake_server", "--port", str(free_port)]
    fake = fakes.spawn([*argv, "--pid-file", str(where / "pid")], free_port, where)
    assert fake.get("/health").json() == {"status": "ok"}
    fake.process.terminate()
    assert fake.returncode() == 0
