"""The run file's ``[residency]`` and ``[instances.residency]`` tables: read through the one
converter, every bad value refused naming its field, and the rules between them (preload,
swap groups, adopted instances, devices) checked against the instances."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from inferactors import InvalidConfig
from inferactors._config.convert import run_config_from_toml
from inferactors._config.residency import InstanceResidency, ResidencyGroup, ResidencySection
from inferactors._policy.residency_rules import budget_bytes, limits_of, slot_rules

HEAD = """
[managed]
registry = "models.json"
data_root = "state"
serve_programs = { "infer.llamacpp" = "/usr/bin/true" }
"""


def _instance(role: str, port: int, residency: str = "", mode: str = "managed") -> str:
    model = 'model = "tiny"\n' if mode == "managed" else ""
    table = f"residency = {{ {residency} }}\n" if residency else ""
    return (
        f'\n[[instances]]\nmode = "{mode}"\nrole = "{role}"\nruntime = "infer.llamacpp"\n'
        f"{model}serve = {{ port = {port} }}\n{table}"
    )


def _load(text: str) -> object:
    return run_config_from_toml(HEAD + text, Path("/tmp"))


def test_a_full_residency_table_is_read() -> None:
    config = run_config_from_toml(
        HEAD
        + _instance("chat", 9001, "on_demand = true, idle_ttl_s = 60.0, concurrency_limit = 4")
        + _instance("code", 9002, "on_demand = true, accelerators = { gpu0 = 1000 }")
        + """
[residency]
budget = 8000000000
reserve_bytes = 0
accelerators = { gpu0 = 4000 }
max_queue = 10
max_queue_per_model = 3
max_wait_s = 30.0
idle_ttl_s = inf
preload = ["chat"]
[[residency.groups]]
name = "pair"
members = ["chat", "code"]
swap = true
""",
        Path("/tmp"),
    )
    section = config.residency
    assert section == ResidencySection(
        budget=8_000_000_000,
        reserve_bytes=0,
        accelerators=(("gpu0", 4000),),
        max_queue=10,
        max_queue_per_model=3,
        max_wait_s=30.0,
        idle_ttl_s=math.inf,
        preload=("chat",),
        groups=(ResidencyGroup("pair", ("chat", "code"), swap=True),),
    )
    assert config.instances[0].residency == InstanceResidency(
        on_demand=True, idle_ttl_s=60.0, concurrency_limit=4
    )
    rules = slot_rules(config.instances, section)
    assert rules["chat"].idle_ttl_s == 60.0
    assert rules["code"].idle_ttl_s == math.inf  # the run's default
    assert rules["chat"].swap_group == rules["code"].swap_group == "pair"
    limits = limits_of(section, machine_total=16_000_000_000)
    assert limits.budget.memory == 8_000_000_000
    assert limits.budget.get("gpu0") == 4000


def test_auto_budget_is_the_machines_memory_less_the_reserve() -> None:
    section = ResidencySection(reserve_bytes=2_000)
    assert budget_bytes(section, 10_000) == 8_000
    assert budget_bytes(ResidencySection(reserve_bytes=20_000), 10_000) == 0


def test_an_alias_two_instances_claim_routes_to_neither() -> None:
    config = run_config_from_toml(
        HEAD + _instance("chat", 9001) + _instance("code", 9002), Path("/tmp")
    )
    rules = slot_rules(config.instances, None)
    assert rules["chat"].aliases == ()  # both serve "tiny": the name is ambiguous
    assert rules["code"].aliases == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('\n[residency]\nbudget = "lots"\n', '$.residency.budget must be "auto" or a number'),
        ("\n[residency]\nbudget = 0\n", "$.residency.budget must be between 1 and 4 TiB"),
        ("\n[residency]\nmax_wait_s = -1.0\n", "$.residency.max_wait_s must be a positive"),
        ("\n[residency]\nmax_queue = -1\n", "$.residency.max_queue must be at least 0"),
        ("\n[residency]\nidle_ttl_s = nan\n", "$.residency.idle_ttl_s must be a positive"),
        ("\n[residency]\nbogus = 1\n", "$.residency.bogus: unknown key"),
        ('\n[residency]\nmax_wait_s = "1m"\n', "$.residency.max_wait_s: expected number"),
        (
            '\n[residency]\naccelerators = { "gpu 0" = 1 }\n',
            "$.residency.accelerators must be a plain token",
        ),
        ('\n[residency]\npreload = ["ghost"]\n', "$.residency.preload[0]: 'ghost' is not an"),
        ('\n[residency]\npreload = ["chat"]\n', "'chat' is not on demand"),
        (
            '\n[[residency.groups]]\nname = "g"\nmembers = ["chat"]\nswap = true\n',
            "$.residency.groups[0].members[0]: 'chat' is not on demand",
        ),
        (
            '\n[[residency.groups]]\nname = "g"\nmembers = ["nobody"]\n',
            "$.residency.groups[0].members[0]: 'nobody' is not an instance's role",
        ),
    ],
)
def test_a_bad_residency_value_names_its_field(text: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        _load(_instance("chat", 9001) + text)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("residency", "message"),
    [
        ("idle_ttl_s = 0.0", "$.instances[0].residency.idle_ttl_s must be a positive"),
        ("concurrency_limit = 0", "$.instances[0].residency.concurrency_limit must be at least 1"),
        ("estimated_bytes = -5", "$.instances[0].residency.estimated_bytes must be between"),
        ("on_demand = 1", "$.instances[0].residency.on_demand: expected bool"),
        ("accelerators = { gpu9 = 5 }", "$.instances[0].residency.accelerators.gpu9: no such"),
        ("surprise = true", "$.instances[0].residency.surprise: unknown key"),
    ],
)
def test_a_bad_instance_residency_value_names_its_field(residency: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        _load(_instance("chat", 9001, residency))
    assert message in str(refused.value)


def test_an_adopted_instance_cannot_run_on_demand() -> None:
    with pytest.raises(InvalidConfig) as refused:
        _load(_instance("seen", 9001, "on_demand = true", mode="adopted"))
    assert "$.instances[0].residency.on_demand: 'seen' is adopted" in str(refused.value)


def test_two_preloaded_members_of_one_swap_group_are_refused() -> None:
    text = (
        _instance("a", 9001, "on_demand = true")
        + _instance("b", 9002, "on_demand = true")
        + '\n[residency]\npreload = ["a", "b"]\n[[residency.groups]]\nname = "g"\n'
        + 'members = ["a", "b"]\nswap = true\n'
    )
    with pytest.raises(InvalidConfig) as refused:
        _load(text)
    assert "'a' and 'b' are in the swap group 'g'" in str(refused.value)
