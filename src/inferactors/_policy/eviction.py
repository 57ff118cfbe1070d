"""Typed admission of one start, and which residents it evicts (pure; silent: it may be
called for every queued request on every change, so it neither logs nor stamps time).

`admit` answers, for an instance that is not resident (the *target*), exactly one of:

- `FitsNow`: its need fits the room left (budget, less what residents hold, less other
  programs' memory inside the budget, less what earlier waiters claimed) and nothing
  resident conflicts with it: start it.
- `FitsAfterEvicting`: it fits once idle residents are stopped: those ``victims``.
- `MustWait`: it fits only after busy residents (requests in flight, a start someone
  waits for) have drained, or once residents being stopped are gone, or once room
  claimed by requests ahead of it is used; the caller waits, bounded by its maximum wait.
- `NeverFits`: it cannot fit even with every evictable resident gone: its need exceeds
  the budget less what is pinned (persistent group members, always-on instances, adopted
  servers) and less other programs' memory, or a pinned resident excludes it. The
  ``why`` names the need, the budget and what blocks.

Rules, in order:

1. *Conflicts* must go whatever the room: the other members of the target's swap group,
   and every resident the target excludes or that excludes it (``excludes``, bare role or
   ``role:NAME``).
2. Then, least recently used first, until the need fits: residents being stopped (they
   free their room anyway), starts nobody waits for any more, idle residents, busy
   residents, starts someone waits for. Only residents that free a resource the target
   is short of are taken.
3. Never evicted: always-on instances, adopted servers, and members of a persistent group
   for a target outside that group; nor residents an earlier waiter reserved.

Eviction never stops a resident with requests in flight or a start someone waits for: such
victims make the answer `MustWait`, and the caller reserves them (no new request is
granted to them) until they are idle.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from .residency import MEMORY, Bytes, size_text, total


class Hold(enum.Enum):
    """What a resident is doing, as eviction sees it."""

    STOPPING = "stopping"
    """Being drained or stopped: its room comes back without anything more to do."""
    ABANDONED = "abandoned"
    """A start under way that nobody waits for any more: cancelled when room is needed."""
    IDLE = "idle"
    """Resident, nothing in flight."""
    BUSY = "busy"
    """Resident, requests in flight: never stopped until they end."""
    STARTING = "starting"
    """A start under way that someone waits for: never cancelled."""


_ORDER = {hold: rank for rank, hold in enumerate(Hold)}


class Pin(enum.Enum):
    """Why a resident is never evicted."""

    ALWAYS_ON = "always on"
    ADOPTED = "adopted"


@attrs.frozen
class Holder:
    """A resident (or an instance being started or stopped) as eviction sees it.

    Attributes:
        name: its role.
        need: what it holds.
        hold: what it is doing.
        last_used: when its last request ended (or it became resident), for LRU.
        pin: why it is never evicted, None when it may be.
        groups: every group it is in.
        persistent_groups: the persistent groups it is in: only a member of each of them
            may evict it.
        swap_group: its swap group, if any.
        excludes: roles that must not be resident beside it.
    """

    name: str
    need: Bytes
    hold: Hold
    last_used: float = 0.0
    pin: Pin | None = None
    groups: frozenset[str] = frozenset()
    persistent_groups: frozenset[str] = frozenset()
    swap_group: str | None = None
    excludes: frozenset[str] = frozenset()


@attrs.frozen
class Target:
    """The instance to admit: its role, need, groups and excludes (as `Holder`)."""

    name: str
    need: Bytes
    groups: frozenset[str] = frozenset()
    swap_group: str | None = None
    excludes: frozenset[str] = frozenset()


class AdmissionKind(enum.Enum):
    """The four answers, for metrics and events."""

    FITS_NOW = "fits-now"
    FITS_AFTER_EVICTING = "fits-after-evicting"
    MUST_WAIT = "must-wait"
    NEVER_FITS = "never-fits"


@attrs.frozen
class FitsNow:
    """Start it now."""

    kind = AdmissionKind.FITS_NOW


@attrs.frozen
class FitsAfterEvicting:
    """Stop ``victims`` (idle residents, or starts nobody waits for), then start it."""

    victims: tuple[str, ...]
    kind = AdmissionKind.FITS_AFTER_EVICTING


@attrs.frozen
class MustWait:
    """Wait: ``victims`` must drain first (reserve them), ``stopping`` must be gone; with
    neither, room that requests ahead of it claimed must be used first."""

    victims: tuple[str, ...] = ()
    stopping: tuple[str, ...] = ()
    kind = AdmissionKind.MUST_WAIT


@attrs.frozen
class NeverFits:
    """It cannot fit while the pinned residents and other programs hold what they hold."""

    why: str
    kind = AdmissionKind.NEVER_FITS


Admission = FitsNow | FitsAfterEvicting | MustWait | NeverFits


def admit(
    target: Target,
    holders: Sequence[Holder],
    budget: Bytes,
    foreign: int = 0,
    claimed: Bytes = Bytes(),  # noqa: B008  (frozen value)
    reserved: frozenset[str] = frozenset(),
) -> Admission:
    """Admit ``target`` beside ``holders`` within ``budget`` (module docstring).

    ``foreign`` is other programs' memory inside the budget; ``claimed`` the room that
    requests ahead of this one will take; ``reserved`` the residents they wait for.
    """
    holders = [h for h in holders if h.name != target.name]
    never = never_fits(target, holders, budget, foreign)
    if never is not None:
        return NeverFits(never)
    room = budget - Bytes.of(foreign) - total(h.need for h in holders) - claimed
    forced = [h for h in holders if conflicts(target, h)]
    if not forced and target.need.fits(room):
        return FitsNow()
    if any(h.name in reserved for h in forced):
        return MustWait()
    chosen = _choose(target, holders, forced, room, reserved)
    if chosen is None:
        return MustWait()
    stopping = tuple(h.name for h in chosen if h.hold is Hold.STOPPING)
    waiting = tuple(h.name for h in chosen if h.hold in (Hold.BUSY, Hold.STARTING))
    idle = tuple(h.name for h in chosen if h.hold in (Hold.IDLE, Hold.ABANDONED))
    if waiting:
        return MustWait(victims=idle + waiting, stopping=stopping)
    if idle:
        return FitsAfterEvicting(idle)
    return MustWait(stopping=stopping)


def _choose(
    target: Target,
    holders: Sequence[Holder],
    forced: Sequence[Holder],
    room: Bytes,
    reserved: frozenset[str],
) -> list[Holder] | None:
    """The forced conflicts, then LRU candidates until the need fits; None when even all
    of them leave it short (the room is claimed by requests ahead)."""
    chosen = list(forced)
    free = room + total(h.need for h in chosen)
    candidates = sorted(
        (
            h
            for h in holders
            if h not in forced and evictable_for(target, h) and h.name not in reserved
        ),
        key=lambda h: (_ORDER[h.hold], h.last_used, h.name),
    )
    for holder in candidates:
        short = target.need.short_in(free)
        if not short:
            break
        if any(holder.need.get(resource) > 0 for resource in short):
            chosen.append(holder)
            free = free + holder.need
    return chosen if target.need.fits(free) else None


def evictable_for(target: Target, holder: Holder) -> bool:
    """Whether ``target`` may evict ``holder``: it is neither always on nor adopted, and
    every persistent group it is in holds ``target`` too."""
    return holder.pin is None and holder.persistent_groups <= target.groups


def conflicts(target: Target, holder: Holder) -> bool:
    """Whether ``holder`` must go before ``target`` starts: the same swap group, or
    either excludes the other."""
    same_swap = target.swap_group is not None and target.swap_group == holder.swap_group
    return (
        same_swap
        or _excluded(target.excludes, holder.name)
        or _excluded(holder.excludes, target.name)
    )


def _excluded(excludes: frozenset[str], role: str) -> bool:
    return role in excludes or f"role:{role}" in excludes


def never_fits(
    target: Target, holders: Sequence[Holder], budget: Bytes, foreign: int = 0
) -> str | None:
    """Why ``target`` can never fit beside the pinned ``holders``, or None when evicting
    what may be evicted would make room (module docstring)."""
    for holder in holders:
        if conflicts(target, holder) and not evictable_for(target, holder):
            excluder = holder.name if _excluded(holder.excludes, target.name) else target.name
            return (
                f"unplaceable: {target.name!r} cannot be resident beside {holder.name!r} "
                f"({excluder!r} excludes it; {holder.name!r} is {_pinned_word(holder)})"
            )
    pinned = [h for h in holders if not evictable_for(target, h)]
    capacity = budget - Bytes.of(foreign) - total(h.need for h in pinned)
    short = target.need.short_in(capacity)
    if not short:
        return None
    resource = short[0]
    return _over_budget(target, resource, budget, capacity, pinned, foreign)


def _over_budget(
    target: Target,
    resource: str,
    budget: Bytes,
    capacity: Bytes,
    pinned: Sequence[Holder],
    foreign: int,
) -> str:
    need, whole = target.need.get(resource), budget.get(resource)
    label = "memory" if resource == MEMORY else resource
    held = [
        f"{h.name!r} {size_text(h.need.get(resource))} ({_pinned_word(h)})"
        for h in pinned
        if h.need.get(resource) > 0
    ]
    if resource == MEMORY and foreign > 0:
        held.append(f"other programs {size_text(foreign)}")
    head = f"unplaceable: {target.name!r} needs {size_text(need)} of {label}"
    if not held:
        return f"{head} but the whole {label} budget is {size_text(whole)}"
    free = max(0, capacity.get(resource))
    return (
        f"{head} but only {size_text(free)} of the {size_text(whole)} {label} budget can "
        f"ever be free (held by {', '.join(held)})"
    )


def _pinned_word(holder: Holder) -> str:
    if holder.pin is not None:
        return holder.pin.value
    return "persistent" if holder.persistent_groups else "pinned"


def claim(target_need: Bytes, admission: Admission, holders: Sequence[Holder]) -> Bytes:
    """The room a waiter with ``admission`` takes from what is free now: its need less
    what its victims and the residents being stopped will give back (never negative).
    Requests behind it are admitted as if that room were already held."""
    if isinstance(admission, NeverFits):
        return Bytes()
    if isinstance(admission, FitsNow):
        return target_need
    names = set(admission.victims)
    if isinstance(admission, MustWait):
        names |= set(admission.stopping)
    coming_back = total(h.need for h in holders if h.name in names)
    return (target_need - coming_back).clipped()
