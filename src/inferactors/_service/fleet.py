"""The Fleet (work in progress)."""

from __future__ import annotations

from .views import InstanceView, LifecycleNote, ReloadResult

__all__ = ["InstanceView", "LifecycleNote", "ReloadResult"]
