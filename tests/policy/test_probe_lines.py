"""A server's log of our probes is known from the line alone (issue 10 item 4): the
standard library's access log (mlx_lm.server) and llama.cpp's request line, for a GET of a
probe path from loopback; anything else is the server's own words and is kept."""

from __future__ import annotations

import pytest

from inferactors._policy.probe_lines import is_probe_line

MLX = '127.0.0.1 - - [05/Mar/2025 10:00:01] "{request} HTTP/1.1" {status} -'


@pytest.mark.parametrize(
    "line",
    [
        MLX.format(request="GET /health", status=200),
        MLX.format(request="GET /v1/models", status=200),
        MLX.format(request="GET /health", status=503),
        MLX.format(request="GET /props?model=x", status=404),
        '::1 - - [05/Mar/2025 10:00:01] "GET /health HTTP/1.1" 200 -',
        "0.01.002.003 I srv  log_server_r: request: GET /health 127.0.0.1 200",
        "request: GET /v1/models 127.0.0.1 200\n",
    ],
)
def test_a_probe_request_line_is_a_probe_line(line: str) -> None:
    assert is_probe_line(line)


@pytest.mark.parametrize(
    "line",
    [
        MLX.format(request="POST /v1/chat/completions", status=200),  # real work, deep health
        MLX.format(request="GET /v1/healthcheck", status=200),  # not one of our paths
        '10.0.0.7 - - [05/Mar/2025 10:00:01] "GET /health HTTP/1.1" 200 -',  # not loopback
        "request: POST /completion 127.0.0.1 200",
        "srv  log_server_r: request: GET /health 192.168.1.4 200",
        "OSError: [Errno 98] Address already in use",
        "GET /health from the docs, quoted in a server's help text",
        "",
    ],
)
def test_other_lines_are_kept(line: str) -> None:
    assert not is_probe_line(line)
