"""inferactors: keeps local LLM inference servers registered, healthy and contained.

Everything public is re-exported here from private modules; ``inferactors.testing`` holds
the test helpers (tiny models, fake servers and fleets, a recording proxy). The exception
tree is drawn in ``_errors.py``; the actor design is described in ``design/actors.md``.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from ._actors.capabilities import Capability as Capability
    from ._actors.front_door_members import door_members as door_members
    from ._actors.front_door_members import door_settings as door_settings
    from ._actors.front_door_msgs import DoorMember as DoorMember
    from ._actors.front_door_msgs import DoorSettings as DoorSettings
    from ._actors.front_door_msgs import ResidencyView as ResidencyView
    from ._actors.front_door_scheduler import FrontDoorScheduler as FrontDoorScheduler
    from ._actors.front_door_scheduler import open_scheduler as open_scheduler
    from ._actors.front_door_seam import Grant as Grant
    from ._actors.front_door_seam import ModelEntry as ModelEntry
    from ._actors.front_door_seam import Residency as Residency
    from ._actors.front_door_seam import Scheduler as Scheduler
    from ._actors.front_door_seam import Upstream as Upstream
    from ._actors.runtime import InferRuntime as InferRuntime
    from ._actors.runtime import InstanceHandle as InstanceHandle
    from ._actors.runtime import NetworkExposure as NetworkExposure
    from ._actors.serving import open_runtime as open_runtime
    from ._actors.serving import serve_runtime as serve_runtime
    from ._config.config import ControlMode as ControlMode
    from ._config.config import InferConfig as InferConfig
    from ._config.config import ManagedConfig as ManagedConfig
    from ._config.convert import load_run_config as load_run_config
    from ._config.convert import spec_from_json as spec_from_json
    from ._config.convert import spec_from_toml as spec_from_toml
    from ._config.convert import spec_to_json as spec_to_json
    from ._config.front_door import FrontDoorConfig as FrontDoorConfig
    from ._config.residency import InstanceResidency as InstanceResidency
    from ._config.residency import ResidencyGroup as ResidencyGroup
    from ._config.residency import ResidencySection as ResidencySection
    from ._config.runfile import ManagedSection as ManagedSection
    from ._config.runfile import RunConfig as RunConfig
    from ._config.runfile import RunInstance as RunInstance
    from ._config.server_logs import ServerLogs as ServerLogs
    from ._config.spec import InferenceSpec as InferenceSpec
    from ._config.spec import LatencyClass as LatencyClass
    from ._config.spec import MemoryFootprint as MemoryFootprint
    from ._config.spec import ServeArgs as ServeArgs
    from ._config.supervision import RestartPolicy as RestartPolicy
    from ._config.supervision import RestartType as RestartType
    from ._config.supervision import Supervision as Supervision
    from ._config.supervision import Watchdog as Watchdog
    from ._config.trust import TrustAnchorEntry as TrustAnchorEntry
    from ._edges.bundle import Edges as Edges
    from ._edges.bundle import ProbeTimed as ProbeTimed
    from ._edges.bundle import http_prober_factory as http_prober_factory
    from ._edges.capture import RunEvidence as RunEvidence
    from ._edges.llama_build import locate_llama_server as locate_llama_server
    from ._edges.log_ring import LogLine as LogLine
    from ._edges.orphan_report import OrphanOutcome as OrphanOutcome
    from ._edges.orphan_report import ReapedOrphan as ReapedOrphan
    from ._edges.probe import ProbeClient as ProbeClient
    from ._edges.probe import Prober as Prober
    from ._errors import AdmissionRefused as AdmissionRefused
    from ._errors import BackendError as BackendError
    from ._errors import BadRequest as BadRequest
    from ._errors import DeepHealthTimeout as DeepHealthTimeout
    from ._errors import FrontDoorRefused as FrontDoorRefused
    from ._errors import InferactorsError as InferactorsError
    from ._errors import InstanceDown as InstanceDown
    from ._errors import InvalidConfig as InvalidConfig
    from ._errors import InvalidState as InvalidState
    from ._errors import ModelError as ModelError
    from ._errors import ModelNotReady as ModelNotReady
    from ._errors import NoVerdict as NoVerdict
    from ._errors import PinMismatch as PinMismatch
    from ._errors import RefusalKind as RefusalKind
    from ._errors import RequestRefused as RequestRefused
    from ._errors import StartTimeout as StartTimeout
    from ._errors import UnknownInstance as UnknownInstance
    from ._errors import UnknownModel as UnknownModel
    from ._errors import Unsupported as Unsupported
    from ._events import DeepHealthFailed as DeepHealthFailed
    from ._events import DeepHealthPassed as DeepHealthPassed
    from ._events import Event as Event
    from ._events import EventsLost as EventsLost
    from ._events import ExposureDetected as ExposureDetected
    from ._events import FootprintDrift as FootprintDrift
    from ._events import GaveUp as GaveUp
    from ._events import ImpostorDetected as ImpostorDetected
    from ._events import InstanceCrashed as InstanceCrashed
    from ._events import ModelTampered as ModelTampered
    from ._events import OnDemandStart as OnDemandStart
    from ._events import ProcessExited as ProcessExited
    from ._events import ProcessStarted as ProcessStarted
    from ._events import QueuedRequestRefused as QueuedRequestRefused
    from ._events import ResidencyStop as ResidencyStop
    from ._events import RestartFailed as RestartFailed
    from ._events import RestartScheduled as RestartScheduled
    from ._events import StateChanged as StateChanged
    from ._events import SupervisorCaughtUp as SupervisorCaughtUp
    from ._events import SupervisorOverloaded as SupervisorOverloaded
    from ._events import WorkProgress as WorkProgress
    from ._flavor import InferFlavor as InferFlavor
    from ._flavor import ModelFormat as ModelFormat
    from ._models.anchors import AnchorKind as AnchorKind
    from ._models.anchors import TrustAnchors as TrustAnchors
    from ._models.manifest import ModelFile as ModelFile
    from ._models.manifest import ModelManifest as ModelManifest
    from ._models.manifest import ModelSignature as ModelSignature
    from ._models.manifest import ModelSource as ModelSource
    from ._models.manifest import ResolvedModel as ResolvedModel
    from ._models.registry import ModelCheck as ModelCheck
    from ._models.registry import ModelRegistry as ModelRegistry
    from ._policy.admission import Admission as Admission
    from ._policy.exposure import Exposure as Exposure
    from ._policy.launch import Launch as Launch
    from ._policy.probe_report import CompletionResult as CompletionResult
    from ._policy.probe_report import Health as Health
    from ._policy.probe_report import Loading as Loading
    from ._policy.probe_report import ServerReport as ServerReport
    from ._policy.probe_report import Unhealthy as Unhealthy
    from ._policy.probe_report import Unreachable as Unreachable
    from ._policy.probe_report import Up as Up
    from ._service.front_door_server import FrontDoor as FrontDoor
    from ._service.front_door_server import open_front_door as open_front_door
    from ._service.front_door_server import serve_front_door as serve_front_door
    from ._service.views import InstanceView as InstanceView
    from ._service.views import Lifecycle as Lifecycle
    from ._service.views import LifecycleNote as LifecycleNote
    from ._service.views import ReloadResult as ReloadResult
    from ._status import InstanceState as InstanceState
    from ._status import InstanceStatus as InstanceStatus
    from ._status import SupervisorStatus as SupervisorStatus
    from ._stop_reasons import Diagnosis as Diagnosis
    from ._stop_reasons import FaultKind as FaultKind
    from ._stop_reasons import StopReason as StopReason

_LAZY: dict[str, str] = {
    "Admission": "._policy.admission",
    "AdmissionRefused": "._errors",
    "AnchorKind": "._models.anchors",
    "BackendError": "._errors",
    "BadRequest": "._errors",
    "Capability": "._actors.capabilities",
    "CompletionResult": "._policy.probe_report",
    "ControlMode": "._config.config",
    "DeepHealthFailed": "._events",
    "DeepHealthPassed": "._events",
    "DeepHealthTimeout": "._errors",
    "Diagnosis": "._stop_reasons",
    "DoorMember": "._actors.front_door_msgs",
    "DoorSettings": "._actors.front_door_msgs",
    "Edges": "._edges.bundle",
    "Event": "._events",
    "EventsLost": "._events",
    "Exposure": "._policy.exposure",
    "ExposureDetected": "._events",
    "FaultKind": "._stop_reasons",
    "FootprintDrift": "._events",
    "FrontDoor": "._service.front_door_server",
    "FrontDoorConfig": "._config.front_door",
    "FrontDoorRefused": "._errors",
    "FrontDoorScheduler": "._actors.front_door_scheduler",
    "GaveUp": "._events",
    "Grant": "._actors.front_door_seam",
    "Health": "._policy.probe_report",
    "ImpostorDetected": "._events",
    "InferConfig": "._config.config",
    "InferFlavor": "._flavor",
    "InferRuntime": "._actors.runtime",
    "InferactorsError": "._errors",
    "InferenceSpec": "._config.spec",
    "InstanceCrashed": "._events",
    "InstanceDown": "._errors",
    "InstanceHandle": "._actors.runtime",
    "InstanceResidency": "._config.residency",
    "InstanceState": "._status",
    "InstanceStatus": "._status",
    "InstanceView": "._service.views",
    "InvalidConfig": "._errors",
    "InvalidState": "._errors",
    "LatencyClass": "._config.spec",
    "Launch": "._policy.launch",
    "Lifecycle": "._service.views",
    "LifecycleNote": "._service.views",
    "Loading": "._policy.probe_report",
    "LogLine": "._edges.log_ring",
    "ManagedConfig": "._config.config",
    "ManagedSection": "._config.runfile",
    "MemoryFootprint": "._config.spec",
    "ModelCheck": "._models.registry",
    "ModelEntry": "._actors.front_door_seam",
    "ModelError": "._errors",
    "ModelFile": "._models.manifest",
    "ModelFormat": "._flavor",
    "ModelManifest": "._models.manifest",
    "ModelNotReady": "._errors",
    "ModelRegistry": "._models.registry",
    "ModelSignature": "._models.manifest",
    "ModelSource": "._models.manifest",
    "ModelTampered": "._events",
    "NetworkExposure": "._actors.runtime",
    "NoVerdict": "._errors",
    "OnDemandStart": "._events",
    "OrphanOutcome": "._edges.orphan_report",
    "PinMismatch": "._errors",
    "ProbeClient": "._edges.probe",
    "ProbeTimed": "._edges.bundle",
    "Prober": "._edges.probe",
    "ProcessExited": "._events",
    "ProcessStarted": "._events",
    "QueuedRequestRefused": "._events",
    "ReapedOrphan": "._edges.orphan_report",
    "RefusalKind": "._errors",
    "ReloadResult": "._service.views",
    "RequestRefused": "._errors",
    "Residency": "._actors.front_door_seam",
    "ResidencyGroup": "._config.residency",
    "ResidencySection": "._config.residency",
    "ResidencyStop": "._events",
    "ResidencyView": "._actors.front_door_msgs",
    "ResolvedModel": "._models.manifest",
    "RestartFailed": "._events",
    "RestartPolicy": "._config.supervision",
    "RestartScheduled": "._events",
    "RestartType": "._config.supervision",
    "RunConfig": "._config.runfile",
    "RunEvidence": "._edges.capture",
    "RunInstance": "._config.runfile",
    "Scheduler": "._actors.front_door_seam",
    "ServeArgs": "._config.spec",
    "ServerLogs": "._config.server_logs",
    "ServerReport": "._policy.probe_report",
    "StartTimeout": "._errors",
    "StateChanged": "._events",
    "StopReason": "._stop_reasons",
    "Supervision": "._config.supervision",
    "SupervisorCaughtUp": "._events",
    "SupervisorOverloaded": "._events",
    "SupervisorStatus": "._status",
    "TrustAnchorEntry": "._config.trust",
    "TrustAnchors": "._models.anchors",
    "Unhealthy": "._policy.probe_report",
    "UnknownInstance": "._errors",
    "UnknownModel": "._errors",
    "Unreachable": "._policy.probe_report",
    "Unsupported": "._errors",
    "Up": "._policy.probe_report",
    "Upstream": "._actors.front_door_seam",
    "Watchdog": "._config.supervision",
    "WorkProgress": "._events",
    "door_members": "._actors.front_door_members",
    "door_settings": "._actors.front_door_members",
    "http_prober_factory": "._edges.bundle",
    "load_run_config": "._config.convert",
    "locate_llama_server": "._edges.llama_build",
    "open_front_door": "._service.front_door_server",
    "open_runtime": "._actors.serving",
    "open_scheduler": "._actors.front_door_scheduler",
    "serve_front_door": "._service.front_door_server",
    "serve_runtime": "._actors.serving",
    "spec_from_json": "._config.convert",
    "spec_from_toml": "._config.convert",
    "spec_to_json": "._config.convert",
}
"""Where each public name lives, imported on its first use (PEP 562 ``__getattr__``): a
process that needs one corner of the package (the CLI's client commands, a test run that
uses no fixture of the plugin) does not load the rest (trio, hypercorn, starlette, ...).
``tests/test_public_api.py`` holds it, the type checker's imports above and `__all__`
to the same names."""

__all__ = [
    "Admission",
    "AdmissionRefused",
    "AnchorKind",
    "BackendError",
    "BadRequest",
    "Capability",
    "CompletionResult",
    "ControlMode",
    "DeepHealthFailed",
    "DeepHealthPassed",
    "DeepHealthTimeout",
    "Diagnosis",
    "DoorMember",
    "DoorSettings",
    "Edges",
    "Event",
    "EventsLost",
    "Exposure",
    "ExposureDetected",
    "FaultKind",
    "FootprintDrift",
    "FrontDoor",
    "FrontDoorConfig",
    "FrontDoorRefused",
    "FrontDoorScheduler",
    "GaveUp",
    "Grant",
    "Health",
    "ImpostorDetected",
    "InferConfig",
    "InferFlavor",
    "InferRuntime",
    "InferactorsError",
    "InferenceSpec",
    "InstanceCrashed",
    "InstanceDown",
    "InstanceHandle",
    "InstanceResidency",
    "InstanceState",
    "InstanceStatus",
    "InstanceView",
    "InvalidConfig",
    "InvalidState",
    "LatencyClass",
    "Launch",
    "Lifecycle",
    "LifecycleNote",
    "Loading",
    "LogLine",
    "ManagedConfig",
    "ManagedSection",
    "MemoryFootprint",
    "ModelCheck",
    "ModelEntry",
    "ModelError",
    "ModelFile",
    "ModelFormat",
    "ModelManifest",
    "ModelNotReady",
    "ModelRegistry",
    "ModelSignature",
    "ModelSource",
    "ModelTampered",
    "NetworkExposure",
    "NoVerdict",
    "OnDemandStart",
    "OrphanOutcome",
    "PinMismatch",
    "ProbeClient",
    "ProbeTimed",
    "Prober",
    "ProcessExited",
    "ProcessStarted",
    "QueuedRequestRefused",
    "ReapedOrphan",
    "RefusalKind",
    "ReloadResult",
    "RequestRefused",
    "Residency",
    "ResidencyGroup",
    "ResidencySection",
    "ResidencyStop",
    "ResidencyView",
    "ResolvedModel",
    "RestartFailed",
    "RestartPolicy",
    "RestartScheduled",
    "RestartType",
    "RunConfig",
    "RunEvidence",
    "RunInstance",
    "Scheduler",
    "ServeArgs",
    "ServerLogs",
    "ServerReport",
    "StartTimeout",
    "StateChanged",
    "StopReason",
    "Supervision",
    "SupervisorCaughtUp",
    "SupervisorOverloaded",
    "SupervisorStatus",
    "TrustAnchorEntry",
    "TrustAnchors",
    "Unhealthy",
    "UnknownInstance",
    "UnknownModel",
    "Unreachable",
    "Unsupported",
    "Up",
    "Upstream",
    "Watchdog",
    "WorkProgress",
    "door_members",
    "door_settings",
    "http_prober_factory",
    "load_run_config",
    "locate_llama_server",
    "open_front_door",
    "open_runtime",
    "open_scheduler",
    "serve_front_door",
    "serve_runtime",
    "spec_from_json",
    "spec_from_toml",
    "spec_to_json",
]


if not typing.TYPE_CHECKING:  # the type checker reads the imports above instead

    def __getattr__(name: str) -> object:
        """The public ``name``, imported from its module on first use (then kept here)."""
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
