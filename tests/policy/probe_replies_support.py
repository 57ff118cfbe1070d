"""Sample replies of llama-server, mlx_lm.server and Ollama, as the probe sees them: a model
list, llama-server's loading error, Ollama's tags and running models, and a one-token chat
completion.

Shared by the pure parsing tests beside ``_policy/probe_parse.py`` and the probe's client
tests in ``tests/edges``, imported as ``policy.probe_replies_support``.
"""

from __future__ import annotations

LLAMA_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf",
            "object": "model",
            "owned_by": "llamacpp",
            "created": 1735142223,
            "meta": {"vocab_type": 2, "n_vocab": 128256, "n_ctx_train": 131072},
        }
    ],
}
LLAMA_LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
OLLAMA_TAGS = {
    "models": [
        {"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189},
        {"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size": 397821319},
    ]
}
OLLAMA_PS = {"models": [{"name": "qwen2.5:0.5b", "model": "qwen2.5:0.5b", "size_vram": 1}]}
COMPLETION = {
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": " and"}, "finish_reason": "length"}
    ],
    "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
}
