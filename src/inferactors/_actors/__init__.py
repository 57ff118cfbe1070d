"""The actor tree: the runtime facade, the supervisor, the instance and Ollama actors, their
workers, mailbox and messages, and admission's I/O.

May import `_edges`, `_policy`, `_models`, `_config` and the shared vocabulary; never `_cli`.
"""
