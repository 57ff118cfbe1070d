"""inferactors: keeps local LLM inference servers registered, healthy and contained."""

from ._errors import AdmissionRefused as AdmissionRefused
from ._errors import BackendError as BackendError
from ._errors import DeepHealthTimeout as DeepHealthTimeout
from ._errors import InferactorsError as InferactorsError
from ._errors import InvalidConfig as InvalidConfig
from ._errors import InvalidState as InvalidState
from ._errors import ModelError as ModelError
from ._errors import ModelNotReady as ModelNotReady
from ._errors import UnknownInstance as UnknownInstance
from ._errors import UnknownModel as UnknownModel
from ._errors import Unsupported as Unsupported
from ._flavor import InferFlavor as InferFlavor
from ._flavor import ModelFormat as ModelFormat

__all__ = [
    "AdmissionRefused",
    "BackendError",
    "DeepHealthTimeout",
    "InferFlavor",
    "InferactorsError",
    "InvalidConfig",
    "InvalidState",
    "ModelError",
    "ModelNotReady",
    "UnknownInstance",
    "UnknownModel",
    "Unsupported",
]
