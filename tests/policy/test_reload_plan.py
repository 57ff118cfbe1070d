"""The reload diff (`_policy/reload_plan`): what a reload does to each instance, by name."""

from __future__ import annotations

from pathlib import Path

import attrs

from inferactors._config.config import ControlMode
from inferactors._config.runfile import ManagedSection, RunConfig, RunInstance
from inferactors._config.server_logs import ServerLogs
from inferactors._config.spec import InferenceSpec, ServeArgs
from inferactors._config.supervision import RestartPolicy, Supervision
from inferactors._flavor import InferFlavor
from inferactors._policy.reload_plan import ReloadPlan, placements, plan_reload

LLAMA = InferFlavor.LLAMACPP
MANAGED = ManagedSection(
    registry=Path("/r/models.json"),
    data_root=Path("/r/state"),
    serve_programs=((LLAMA, Path("/bin/llama-server")), (InferFlavor.MLX_LM, Path("/bin/mlx"))),
)


def managed(role: str, port: int, flavor: InferFlavor = LLAMA) -> RunInstance:
    spec = InferenceSpec(role, flavor, "tiny", serve=ServeArgs(port=port))
    return RunInstance(ControlMode.MANAGED, spec)


def adopted(role: str, port: int) -> RunInstance:
    return RunInstance(ControlMode.ADOPTED, InferenceSpec(role, LLAMA, serve=ServeArgs(port=port)))


def config(*instances: RunInstance) -> RunConfig:
    return RunConfig(managed=MANAGED, instances=instances)


BASE = config(managed("a", 9001), managed("b", 9002), adopted("c", 9003), managed("d", 9004))


def test_added_removed_changed_and_unchanged_by_name() -> None:
    new = config(
        managed("a", 9001),
        managed("b", 9012),  # its port moved
        adopted("c", 9003),
        managed("e", 9005),
    )
    assert plan_reload(placements(BASE), placements(new)) == ReloadPlan(
        added=("e",), removed=("d",), changed=("b",), unchanged=("a", "c")
    )


def test_the_same_file_changes_nothing() -> None:
    assert plan_reload(placements(BASE), placements(BASE)) == ReloadPlan(
        unchanged=("a", "b", "c", "d")
    )


def test_a_supervision_or_mode_change_is_a_change() -> None:
    slow = RestartPolicy(max_restarts=1)
    a = attrs.evolve(managed("a", 9001), supervision=Supervision(restart=slow))
    c = RunInstance(ControlMode.MANAGED, attrs.evolve(adopted("c", 9003).spec, model="tiny"))
    new = config(a, managed("b", 9002), c, managed("d", 9004))
    assert plan_reload(placements(BASE), placements(new)).changed == ("a", "c")


def test_a_managed_section_change_changes_every_managed_instance_of_that_flavor() -> None:
    """Managed llama instances change; the adopted one, whose runtime has no [managed]
    settings, does not; an mlx instance does not when only llama's program moved."""
    old = config(managed("a", 9001), adopted("c", 9003), managed("m", 9006, InferFlavor.MLX_LM))
    programs = ((LLAMA, Path("/opt/llama-server")), (InferFlavor.MLX_LM, Path("/bin/mlx")))
    new = attrs.evolve(old, managed=attrs.evolve(MANAGED, serve_programs=programs))
    plan = plan_reload(placements(old), placements(new))
    assert (plan.changed, plan.unchanged) == (("a",), ("c", "m"))
    run_as = attrs.evolve(old, managed=attrs.evolve(MANAGED, run_as="llm"))
    assert plan_reload(placements(old), placements(run_as)).changed == ("a", "m")


def test_a_node_id_or_probe_timeout_change_changes_every_instance() -> None:
    for new in (attrs.evolve(BASE, node_id="elsewhere"), attrs.evolve(BASE, probe_timeout_s=5.0)):
        assert plan_reload(placements(BASE), placements(new)).changed == ("a", "b", "c", "d")


def test_held_down_instances_that_did_not_change_are_revived() -> None:
    new = config(managed("a", 9001), managed("b", 9012), adopted("c", 9003))
    plan = plan_reload(placements(BASE), placements(new), held={"a", "b", "d"})
    assert plan == ReloadPlan(removed=("d",), changed=("b",), unchanged=("c",), revived=("a",))
    assert plan.to_unload == ("a", "b", "d")
    assert plan.to_load == ("a", "b")


def test_only_what_reaches_an_instance_changes_it() -> None:
    """``keep_alive`` reaches an Ollama model only; ``[managed.logs]`` reaches no process
    (rings are resized as they are); a ``restart`` default reaches those that take it."""
    own = attrs.evolve(managed("own", 9007), supervision=Supervision(restart=RestartPolicy(9)))
    ollama = managed("notes", 11434, InferFlavor.OLLAMA)
    old = config(managed("a", 9001), own, adopted("c", 9003), ollama)
    keep_alive = attrs.evolve(old, managed=attrs.evolve(MANAGED, keep_alive="45m"))
    assert plan_reload(placements(old), placements(keep_alive)).changed == ("notes",)
    logs = attrs.evolve(old, managed=attrs.evolve(MANAGED, logs=ServerLogs(lines=5)))
    assert plan_reload(placements(old), placements(logs)).changed == ()
    restart = attrs.evolve(old, managed=attrs.evolve(MANAGED, restart=RestartPolicy(1)))
    assert plan_reload(placements(old), placements(restart)).changed == ("a", "notes")
    ready = attrs.evolve(old, managed=attrs.evolve(MANAGED, readiness_timeout_s=5.0))
    assert plan_reload(placements(old), placements(ready)).changed == ("a", "notes", "own")
