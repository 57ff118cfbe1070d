"""A small trio application that embeds inferactors: it starts one managed chat server and
waits until it answers."""

from __future__ import annotations

from inferactors import InferenceSpec, InferRuntime, InstanceHandle, InstanceState


async def start_chat(runtime: InferRuntime, spec: InferenceSpec) -> InstanceHandle:
    """Load and start ``spec``; return once its server is Running (answered one token)."""
    handle = await runtime.load(spec)
    await runtime.start(handle)
    await runtime.wait_state(handle, InstanceState.RUNNING)
    return handle
