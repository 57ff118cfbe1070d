"""Tests of the Ollama client's pure parts (``_policy/ollama_parse.py``; checklist 66): the
keep_alive value as sent, the load body, tag matching with an implied ``latest``, reading
/api/ps entries and their expiry times, mapping load replies to errors, and `ExpiryWatch`
telling our own idle timer restarting from a foreign keep_alive.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from inferactors._errors import BackendError, InvalidConfig
from inferactors._policy.ollama_parse import (
    ExpiryWatch,
    LoadedModel,
    OllamaLoadTimeout,
    check_load_reply,
    keep_alive_json,
    load_body,
    parse_expiry,
    parse_ps,
    parse_tags,
    same_tag,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        (-1, -1),
        (3600, 3600),
        ("-1", -1),
        ("+60", 60),
        ("0", 0),
        ("30m", "30m"),
        ("-1m", "-1m"),
        (" 5", " 5"),  # not an integer to a strict parser: sent as written
        ("1_000", "1_000"),
        (str(2**63), str(2**63)),  # beyond 64 bits: not a number
    ],
)
def test_keep_alive_is_a_number_when_it_parses_as_one(value: str | int, sent: int | str) -> None:
    assert keep_alive_json(value) == sent
    assert type(keep_alive_json(value)) is type(sent)


def test_keep_alive_refuses_a_bool() -> None:
    with pytest.raises(InvalidConfig):
        keep_alive_json(True)


def test_the_load_body_is_the_documented_one() -> None:
    assert load_body("qwen3:0.6b", "-1") == {
        "model": "qwen3:0.6b",
        "prompt": "",
        "stream": False,
        "keep_alive": -1,
    }


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("tiny", "tiny:latest", True),
        ("tiny:latest", "tiny", True),
        ("tiny", "tiny", True),
        ("qwen2.5:0.5b", "qwen2.5:0.5b", True),
        ("qwen2.5", "qwen2.5:0.5b", False),
        ("qwen", "qwen2.5:latest", False),
        ("tiny:q4", "tiny:latest", False),
        ("localhost:5000/ns/tiny", "localhost:5000/ns/tiny:latest", True),
        ("library/tiny", "registry.ollama.ai/library/tiny:latest", True),
        ("user/tiny", "tiny", False),
        ("localhost:5000/tiny", "localhost:5000/tiny:latest", False),  # no such Ollama name
    ],
)
def test_same_tag_reads_a_missing_tag_as_latest(a: str, b: str, same: bool) -> None:
    assert same_tag(a, b) is same


def test_expiry_parses_gos_rfc3339_and_keeps_anything_else_raw() -> None:
    assert parse_expiry("2024-06-04T14:38:31.837530123-07:00") == datetime(
        2024, 6, 4, 21, 38, 31, 837530, tzinfo=UTC
    )
    assert parse_expiry("2318-08-21T10:00:00Z") == datetime(2318, 8, 21, 10, tzinfo=UTC)
    assert parse_expiry("soon") == "soon"
    assert parse_expiry("2024-06-04T14:38:31") == "2024-06-04T14:38:31"  # no zone: raw
    assert parse_expiry(None) is None
    assert parse_expiry(12) is None


def test_ps_entries_are_read_leniently() -> None:
    body = (
        b'{"models": [{"name": "a:latest", "model": "a:latest", "digest": "d1",'
        b' "expires_at": "2030-01-01T00:00:00Z", "size_vram": 7},'
        b' {"model": "b:1"}, 3, {"size": 1}]}'
    )
    assert parse_ps(body) == (
        LoadedModel("a:latest", "a:latest", "d1", datetime(2030, 1, 1, tzinfo=UTC), 7),
        LoadedModel("b:1", "b:1"),
    )


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, b'{"error":"timed out waiting for llama runner to start - progress 0.00 - "}', "t"),
        (500, b'{"error":"llama runner process has terminated: exit status 2"}', "b"),
        (404, b'{"error":"model \'m\' not found"}', "b"),
        (200, b'{"done":true,"done_reason":"load"}', None),
    ],
)
def test_load_replies_map_to_errors(status: int, body: bytes, kind: str | None) -> None:
    if kind is None:
        check_load_reply(status, body)
        return
    with pytest.raises(BackendError) as caught:
        check_load_reply(status, body)
    assert isinstance(caught.value, OllamaLoadTimeout) is (kind == "t")
    assert str(caught.value) == f"ollama load returned HTTP {status}: {body.decode()[:200]}"


def loaded_at(expires_at: datetime | str | None) -> LoadedModel:
    return LoadedModel("m:latest", "m:latest", expires_at=expires_at)


def test_expiry_watch_accepts_the_idle_timer_restarting() -> None:
    watch = ExpiryWatch.after_load(loaded_at(T0))
    watch, verdict = watch.observe(loaded_at(T0), 10.0)
    assert verdict == "kept"
    watch, verdict = watch.observe(loaded_at(T0 + timedelta(seconds=42)), 45.0)
    assert verdict == "kept"  # a request finished about 42 s after the load
    assert watch.last == T0 + timedelta(seconds=42)
    assert watch.observe(None, 50.0)[1] == "gone"


@pytest.mark.parametrize(
    ("moved_s", "elapsed_s"),
    [
        (-(300 * 365 * 86400.0), 60.0),  # forever -> "5m": the expiry jumped back centuries
        (-60.0, 10.0),  # earlier than ever possible
        (3600.0, 60.0),  # later than time has passed: a longer keep_alive
    ],
)
def test_expiry_watch_notices_a_foreign_keep_alive(moved_s: float, elapsed_s: float) -> None:
    watch = ExpiryWatch.after_load(loaded_at(T0))
    _, verdict = watch.observe(loaded_at(T0 + timedelta(seconds=moved_s)), elapsed_s)
    assert verdict == "changed"


def test_expiry_watch_notices_a_shorter_keep_alive_set_late() -> None:
    """ "30m" at load, "5m" by a foreign client 26 minutes later: the new expiry (load + 31m)
    is later than the old one, but earlier than any request finishing now could give."""
    watch = ExpiryWatch.after_load(loaded_at(T0))
    watch, verdict = watch.observe(loaded_at(T0), 26 * 60.0)
    assert verdict == "kept"
    _, verdict = watch.observe(loaded_at(T0 + timedelta(minutes=1)), 26 * 60.0 + 1)
    assert verdict == "changed"


def test_expiry_watch_compares_unparsed_expiries_by_equality() -> None:
    watch = ExpiryWatch.after_load(loaded_at("soon"))
    assert watch.observe(loaded_at("soon"), 5.0)[1] == "kept"
    assert watch.observe(loaded_at("later"), 5.0)[1] == "changed"


def test_a_cloud_model_is_told_by_its_remote_host() -> None:
    body = (
        b'{"models": [{"name": "gpt-oss:120b-cloud", "model": "gpt-oss:120b-cloud",'
        b' "remote_model": "gpt-oss:120b", "remote_host": "https://ollama.com:443"},'
        b' {"name": "tiny:latest", "model": "tiny:latest", "remote_host": ""}]}'
    )
    cloud, local = parse_tags(body)
    assert (cloud.cloud, cloud.remote_host, cloud.remote_model) == (
        True,
        "https://ollama.com:443",
        "gpt-oss:120b",
    )
    assert not local.cloud  # an empty remote_host is a local model
