"""The kit's fake llama-server is a drop-in ``serve_program`` for allowlisted ``extra_args``
(issue 9 item 4): its ``--help`` lists the real llama-server's flags, so admission's check
against the binary's own flags lets them through, and the fake takes (and ignores where it
does not act on them) what the real server takes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import trio

from e2e.field_support import WAIT_S, Bench
from inferactors import InferenceSpec, InferFlavor, InstanceState, ServeArgs, open_runtime
from inferactors._policy.help_flags import parse_help_flags
from inferactors.testing._fake_faults import FakeServerFaults


async def test_the_fake_accepts_everyday_flags_and_reaches_running(
    bench: Bench, free_port: int
) -> None:
    serve = ServeArgs(port=free_port, extra_args=("--alias", "x", "-np", "2"))
    spec = InferenceSpec(role="chat", runtime=InferFlavor.LLAMACPP, model="tiny", serve=serve)
    async with open_runtime(bench.config(bench.program(FakeServerFaults())), node_id="t") as rt:
        handle = await rt.load(spec)
        await rt.start(handle)
        with trio.fail_after(WAIT_S):
            await rt.wait_state(handle, InstanceState.RUNNING)
        assert (await rt.deep_health(handle)).text
        await rt.stop(handle, 5.0)


def help_of(program: Path) -> set[str]:
    done = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=WAIT_S)
    return set(parse_help_flags(done.stdout + done.stderr))


def test_the_fakes_help_lists_every_flag_of_the_real_llama_server(
    bench: Bench, llama_server: Path
) -> None:
    real = help_of(llama_server)
    assert {"--alias", "-np", "--parallel", "--jinja", "--metrics"} <= real
    assert real - help_of(bench.program(FakeServerFaults())) == set()
