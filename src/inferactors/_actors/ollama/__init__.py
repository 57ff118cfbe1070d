"""The managed Ollama instance actor, as one package like the instance actor's: ``actor`` is
the loop, ``step`` every decision (pure), ``state`` what it knows, ``status`` how that reads,
``effects`` what the loop carries out, ``messages`` what its workers post back, ``work`` the
workers, and ``adopted`` the guard on an adopted Ollama's deep health. See design/actors.md."""

from .actor import OllamaActor as OllamaActor
