"""A llama-server's own metrics keep the names it gives them: its counter
``llamacpp:n_tokens_max`` (no ``_total``; prometheus-client's parser would rename it
``..._total``) is re-exported untyped under its own name, as ``docs/metrics.md`` says; a
counter named ``..._total`` stays a counter of that name."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from inferactors._edges.engine_metrics import EngineScrape, parse_metrics
from inferactors._service.metrics_engines import EngineFigures

LLAMA_CPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 7
# HELP llamacpp:n_tokens_max Largest observed n_tokens.
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 42
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""


def exposed() -> list[str]:
    figures = EngineFigures()
    labels = ("chat", "infer.llamacpp", "managed")
    figures.update({labels: EngineScrape(parse_metrics(LLAMA_CPP))}, {})
    registry = CollectorRegistry()
    registry.register(figures)
    return generate_latest(registry).decode().splitlines()


def test_a_counter_without_total_keeps_its_name_untyped() -> None:
    lines = exposed()
    assert "# TYPE llamacpp:n_tokens_max untyped" in lines
    ours = 'flavor="infer.llamacpp",instance="chat",mode="managed"'
    assert f"llamacpp:n_tokens_max{{{ours}}} 42.0" in lines
    assert not any("n_tokens_max_total" in line for line in lines)


def test_the_other_families_keep_their_names_and_types() -> None:
    lines = exposed()
    assert "# TYPE llamacpp:prompt_tokens_total counter" in lines
    assert any(line.startswith("llamacpp:prompt_tokens_total{") for line in lines)
    assert "# TYPE llamacpp:requests_processing gauge" in lines
