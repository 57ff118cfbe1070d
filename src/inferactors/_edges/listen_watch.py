"""Noticing a new listener beyond loopback on the host, once per tick for a whole runtime.

A managed server's exposure watch must see a listener its tree binds beyond loopback
within 250 ms, so the host's LISTEN table is read every `PERIOD_S`. Reading it is cheap;
waking every watch on every tick to scan its tree is not, and neither is waking the trio
loop itself: on an idle 2-core VM a wake of the loop from a 200 ms sleep cost 0.4 ms of CPU
before any work (the loop's own pass, with cold caches), five times a second.

So the table is read in a thread of the runtime's own (named ``inferactors listeners``),
which wakes the loop only when the listeners bound beyond loopback (address, port, inode,
holder) differ from its last read: then the generation moves on, the runtime's
`SocketTable` drops its cached dumps and every waiter of `ListenerWatch.changed` returns to
scan its own tree (from a fresh dump). The thread's wake and read cost 0.25 to 0.35 ms of
CPU cold (a bare thread wake 0.11 ms; the ``sock_diag`` query 0.02 ms warm), less than the
loop's wake alone. A quiet host costs one read per tick for the runtime and wakes nobody.

The thread runs while anyone waits and `LINGER_S` after the last waiter left (an exposure
watch leaves for a moment at each of its 1 s refreshes), then ends; the next waiter starts
another. It reads with a netlink ``sock_diag`` socket of its own (the table's reader, when
one was given), falling back for good to ``psutil.net_connections`` (11 to 46 ms a read)
where netlink cannot be used.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

import attrs
import trio

from .._config.binding import is_loopback_name
from .socket_table import NetlinkReader, SocketEntry, SocketTable, psutil_listeners

_log = logging.getLogger(__name__)

PERIOD_S = 0.2
"""The longest gap between two table reads while anyone waits (float seconds, 0.2): with
the scan it wakes (from a fresh dump) and a stop's first signal, a listener bound on
0.0.0.0 is stopped within 250 ms. Each gap is drawn between `JITTER` times this and this:
on a fixed grid, a listener opened for 100 ms of every second in step with the reads was
never seen (the breaker's flapping child: 20 windows, 188 connects from the LAN); drawn,
each such window is seen with a chance of about its length over 175 ms."""

JITTER = 0.75
"""The shortest gap between two reads, as a share of `PERIOD_S` (5.7 reads a second on
average, where a fixed grid made 5)."""

LINGER_S = 2.0
"""How long the reading thread goes on after the last waiter left (float seconds)."""

THREAD_NAME = "inferactors listeners"

_Key = tuple[str, int, int, "int | None"]
_Reader = Callable[[int | None], Sequence[SocketEntry]]


@attrs.define(eq=False)
class ListenerWatch:
    """Generations of the runtime's listeners beyond loopback; see the module notes.

    ``generation`` starts at 1 and moves on each time a read differs from the one
    before (the first read counts as a change), so 0 is a generation no caller has seen.
    ``table`` is the runtime's `SocketTable` (its ``read``, when given, is the thread's
    reader; its cached dumps are dropped on each change).
    """

    table: SocketTable
    period_s: float = PERIOD_S
    linger_s: float = LINGER_S
    generation: int = 1
    _seen: frozenset[_Key] | None = None
    """The last read's listeners beyond loopback (the reading thread's)."""
    _waiters: int = 0
    _reader: threading.Thread | None = None
    """The reading thread, while one runs (under ``_lock``, with ``_waiters``, ``_token``)."""
    _token: trio.lowlevel.TrioToken | None = None
    _lock: threading.Lock = attrs.Factory(threading.Lock)
    _jitter: random.Random = attrs.Factory(random.Random)
    _moved: trio.Event = attrs.Factory(trio.Event)

    async def changed(self, generation: int, deadline: float) -> int:
        """Wait until the listeners beyond loopback differ from those of ``generation``, or
        until trio time ``deadline``; return the generation now (``generation`` itself
        when the deadline came first). A ``generation`` other than the current one returns
        at once (after a checkpoint). Never raises for the kernel's sake (the reader falls
        back to psutil); cancellation ends the wait."""
        await trio.lowlevel.checkpoint()
        if self.generation != generation or trio.current_time() >= deadline:
            return self.generation
        self._join()
        try:
            with trio.move_on_at(deadline):
                while self.generation == generation:
                    await self._moved.wait()
        finally:
            with self._lock:
                self._waiters -= 1
        return self.generation

    def _join(self) -> None:
        """Count a waiter in; start the reading thread when none runs."""
        token = trio.lowlevel.current_trio_token()
        with self._lock:
            self._waiters += 1
            self._token = token  # a thread left by an earlier trio run posts to this one
            if self._reader is not None:
                return
            reader = self._reader = threading.Thread(
                target=self._read_ticks, name=THREAD_NAME, daemon=True
            )
        try:
            reader.start()
        except RuntimeError as error:  # no thread to be had: the watches' own 1 s scans
            _log.warning("listener watch: cannot start its thread (%s)", error)
            with self._lock:
                self._reader = None

    def _read_ticks(self) -> None:
        """The reading thread: a read on each tick while anyone waits and `linger_s` after;
        a change posts `_advance` to the trio run. Whatever ends it, the next waiter starts
        another (a failure is logged)."""
        try:
            self._read_until_done()
        except Exception:
            _log.exception("listener watch: its thread failed")
        finally:
            with self._lock:
                self._release()

    def _read_until_done(self) -> None:
        reader = _TableReader(self.table.read)
        quiet_since: float | None = None
        try:
            while True:
                time.sleep(self._jitter.uniform(JITTER * self.period_s, self.period_s))
                quiet_since = self._quiet_since(quiet_since)
                lingered = quiet_since is not None and time.monotonic() - quiet_since
                if lingered and lingered >= self.linger_s and self._end_if_quiet():
                    return
                seen = reader.beyond_loopback()
                if seen != self._seen:
                    self._seen = seen
                    if not self._post():
                        return
        finally:
            reader.close()

    def _quiet_since(self, since: float | None) -> float | None:
        """When the waiters last went (None: someone waits)."""
        with self._lock:
            if self._waiters:
                return None
        return time.monotonic() if since is None else since

    def _end_if_quiet(self) -> bool:
        """End the thread unless a waiter came."""
        with self._lock:
            if self._waiters:
                return False
            self._release()
            return True

    def _end_if_run_over(self, token: trio.lowlevel.TrioToken) -> bool:
        """End the thread after ``token``'s run ended, unless a newer run waits."""
        with self._lock:
            if self._token is not token:
                return False
            self._release()
            return True

    def _release(self) -> None:
        """No reading thread runs from now on, if the calling thread was it (under
        ``_lock``): a waiter that comes next starts another."""
        if self._reader is threading.current_thread():
            self._reader = None

    def _post(self) -> bool:
        """Post `_advance` to the current trio run; False when the thread is to end (the
        run is over and no newer one waits)."""
        while True:
            with self._lock:
                token = self._token
            if token is None:
                return True
            try:
                token.run_sync_soon(self._advance)
            except trio.RunFinishedError:
                if self._end_if_run_over(token):
                    return False
            else:
                return True

    def _advance(self) -> None:
        """In the trio run: a new generation; fresh dumps for the scans; wake the waiters."""
        self.generation += 1
        self.table.refresh_soon()
        moved, self._moved = self._moved, trio.Event()
        moved.set()


@attrs.define(eq=False)
class _TableReader:
    """The reading thread's reader: ``read`` (None: a netlink socket of its own), falling
    back for good to psutil at its first failure."""

    read: _Reader | None
    _netlink: NetlinkReader | None = None

    def beyond_loopback(self) -> frozenset[_Key]:
        """The listeners bound beyond loopback now (blocking)."""
        return frozenset(
            (e.address, e.port, e.inode, e.pid)
            for e in self._entries()
            if not is_loopback_name(e.address)
        )

    def _entries(self) -> Sequence[SocketEntry]:
        if self.read is None:
            self._netlink = NetlinkReader()
            self.read = self._netlink
        try:
            return self.read(None)
        except Exception as error:  # EPERM, no sock_diag (gVisor, not Linux), ...
            _log.debug("listener watch: netlink unusable (%r); reading psutil instead", error)
            self.close()
            self.read = psutil_listeners
            return self.read(None)

    def close(self) -> None:
        """Close the netlink socket, if one was opened."""
        netlink, self._netlink = self._netlink, None
        if netlink is not None:
            netlink.close()
