"""Every I/O edge, each behind a small Protocol: processes and their output, the process
table, sockets and the exposure scan, the HTTP probe and Ollama clients, containment,
orphan records, and the llama-server build. `bundle.Edges` gathers the swappable ones.

May import `_policy`, `_models`, `_config` and the shared vocabulary; never `_actors` or `_cli`.
"""
