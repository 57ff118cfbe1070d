"""Configuration errors seen while a server lives (issue 9, breaker's part 1), the pure
part: a 401/403 read in the server's words, the fix named, and the restart policy giving up
the first time (a bad model file, by contrast, is given one more try)."""

from __future__ import annotations

import pytest

from inferactors._config.supervision import RestartPolicy
from inferactors._errors import RequestRefused
from inferactors._policy.health_truth import refused_detail
from inferactors._policy.probe_parse import parse_completion, refusal
from inferactors._policy.restart import GiveUp, Restart, RestartBudget
from inferactors._stop_reasons import Diagnosis, FaultKind, StopReason


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (
            401,
            b'{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}',
            "HTTP 401: Invalid API Key",
        ),
        (403, b'{"detail": "Not authenticated"}', "HTTP 403: Not authenticated"),
        (401, b'{"error": "missing  bearer\\n token"}', "HTTP 401: missing bearer token"),
        (401, b"Unauthorized\r\n", "HTTP 401: Unauthorized"),
        (401, b"", "HTTP 401"),
        (401, b"{}", "HTTP 401"),
        (200, b"{}", None),
        (404, b"{}", None),
        (500, b'{"error":{"message":"Invalid API Key"}}', None),
    ],
)
def test_refusal_reads_a_401_or_403_in_the_servers_words(
    status: int, body: bytes, said: str | None
) -> None:
    assert refusal(status, body) == said


def test_a_refused_completion_raises_request_refused_with_the_words() -> None:
    with pytest.raises(RequestRefused) as refused:
        parse_completion(401, b'{"error":{"message":"Invalid API Key"}}')
    assert refused.value.refused == "HTTP 401: Invalid API Key"
    assert str(refused.value) == (
        "deep health: the server refuses our requests (HTTP 401: Invalid API Key)"
    )


def test_the_fix_depends_on_whether_we_sent_a_key() -> None:
    said = "HTTP 401: Invalid API Key"
    assert refused_detail(said, key_sent=False) == (
        "the server refuses our requests (HTTP 401: Invalid API Key): set serve.api_key_file"
    )
    assert refused_detail(said, key_sent=True) == (
        "the server refuses our requests (HTTP 401: Invalid API Key): "
        "check the key in serve.api_key_file"
    )


POLICY = RestartPolicy(max_restarts=5, base_s=1.0, cap_s=1.0, jitter=0.0)


@pytest.mark.parametrize(
    "fault",
    [
        Diagnosis(FaultKind.WRONG_ADDRESS_FAMILY, "listening on [::1]:1, not 127.0.0.1:1: x"),
        Diagnosis(FaultKind.REFUSES_REQUESTS, "the server refuses our requests (HTTP 401)"),
    ],
)
def test_a_fault_seen_while_it_lived_gives_up_the_first_time(fault: Diagnosis) -> None:
    _, decision = RestartBudget(POLICY).decide(
        reason=StopReason.STARTUP_FAILURE, exit_code=None, signal=15, now=0.0, diagnosis=fault
    )
    assert decision == GiveUp(0, f"config-error: {fault.line}")
    assert fault.describe() == fault.line  # our own words, which say the kind


def test_a_printed_fault_still_gets_one_more_try() -> None:
    fault = Diagnosis(FaultKind.BAD_MODEL_FILE, "gguf_init_from_reader: failed to read magic")
    _, decision = RestartBudget(POLICY).decide(
        reason=StopReason.STARTUP_FAILURE, exit_code=1, signal=None, now=0.0, diagnosis=fault
    )
    assert decision == Restart(1, 1.0)
