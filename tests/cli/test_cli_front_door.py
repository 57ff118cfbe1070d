"""``inferactors run`` with a ``[front_door]`` table: one address for every instance of the
run file, answering from each instance's own server once it is Running."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import ollama

from cli.run_support import RunProcess
from inferactors.testing import start_fake_server
from inferactors.testing._fake_replies import TOKEN

RUN_FILE = """
[front_door]
port = 0

[[instances]]
role = "chat"
runtime = "infer.llamacpp"
mode = "adopted"
serve = {{ port = {llama} }}

[[instances]]
role = "small"
runtime = "infer.mlx-lm"
mode = "adopted"
serve = {{ port = {mlx} }}
"""


def test_run_serves_the_front_door_for_its_instances(tmp_path: Path) -> None:
    llama = start_fake_server(tmp_path / "llama")
    mlx = start_fake_server(tmp_path / "mlx", flavor="mlx")
    run_file = tmp_path / "run.toml"
    run_file.write_text(RUN_FILE.format(llama=llama.port, mlx=mlx.port))
    run = RunProcess.start(run_file)
    try:
        url = run.wait_for("front door listening on").rsplit(" ", 1)[-1]
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            listed = httpx.get(url + "/v1/models").json()["data"]
            if all(m["status"]["value"] == "resident" for m in listed):
                break
            time.sleep(0.05)
        assert [(m["id"], m["status"]["value"]) for m in listed] == [
            ("chat", "resident"),
            ("small", "resident"),
        ]
        for model in ("chat", "small"):
            body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
            answer = httpx.post(url + "/v1/chat/completions", json=body)
            assert answer.json()["choices"][0]["message"]["content"] == TOKEN
        with ollama.Client(host=url) as client:
            assert client.generate(model="small", prompt="x").response == TOKEN
            missing = httpx.post(url + "/api/chat", json={"model": "nope", "messages": []})
        assert missing.status_code == 404
        assert '"chat", "small"' in missing.json()["error"]
        run.process.send_signal(signal.SIGTERM)
        assert run.finish() == 0
        assert not any("Running on" in line for line in run.lines)  # hypercorn's banner
    finally:
        run.process.kill()
        llama.stop()
        mlx.stop()
