"""Find a real llama-server, or build the pinned one once into a per-user cache.

Order: ``$INFERACTORS_LLAMA_SERVER`` if set, else ``llama-server`` on
``PATH``, else the cached build of the llama.cpp source pinned inside the
``llama-cpp-python==0.3.36`` source distribution (``design/llama-server.md``).
The cache lives outside any clone, keyed by that version, so later runs, other clones and CI
on the same machine reuse it: ``$INFERACTORS_CACHE_DIR``, else ``/var/cache/inferactors`` for
root (so the unprivileged user a server runs as can reach the binary), else
``$XDG_CACHE_HOME/inferactors``, else ``~/.cache/inferactors``.

This is a synchronous build step (it runs before any trio code); it shells out to pip,
cmake and ninja with argv lists and writes the whole build log to a file it names. A build
interrupted (Ctrl-C: `KeyboardInterrupt`, or any error) removes its half-built tree (the
download, the sources and the objects: about 250 MB) before the exception goes on, and every
build starts from an empty tree, so a re-run starts clean whatever the last one left.
`ensure_llama_server`'s ``build_command`` replaces the download and the compile by a
command given by the caller (never read from the environment): how the tests exercise the
build, its progress and its interruption without compiling llama.cpp, each in a cache
directory of its own.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from .._errors import BackendError
from .safe_tar import extract_data

PINNED_SDIST = "llama-cpp-python==0.3.36"
_SDIST_DIR = "llama_cpp_python-0.3.36"
_KEY = "llama-cpp-python-0.3.36"
_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # portable (AVX2 level): the cached binary survives a CPU change
    "-DLLAMA_BUILD_SERVER=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the default fetches web UI files at build time
)
SCRATCH = ("build", "dl", "src")
"""What a build writes under its root besides the log and the binary (removed after it)."""
_NEEDS = "a C++ compiler (g++), cmake and ninja: apt-get install -y g++ cmake ninja-build"


SYSTEM_CACHE = Path("/var/cache/inferactors")
"""root's cache: a managed server runs as an unprivileged ``run_as`` user, who cannot reach
anything under ``/root``, so root keeps the server binary (and the demo) where it can."""


def cache_dir() -> Path:
    """The per-user cache root of inferactors (see the module docstring; root uses
    `SYSTEM_CACHE`)."""
    explicit = os.environ.get("INFERACTORS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return SYSTEM_CACHE
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "inferactors"


def make_reachable_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents with mode 0755 (readable by the unprivileged
    user a managed server runs as) and return it."""
    for directory in reversed([path, *path.parents]):
        if not directory.exists():
            directory.mkdir(mode=0o755)
            directory.chmod(0o755)  # mkdir's mode is filtered by the umask
    return path


def cached_binary() -> Path:
    """Where the pinned build's ``llama-server`` lives once built."""
    return cache_dir() / "llama-server" / _KEY / "bin" / "llama-server"


def locate_llama_server() -> Path | None:
    """Return a usable llama-server without building, or None.

    Raises:
        BackendError: ``INFERACTORS_LLAMA_SERVER`` is set but is not an executable file.
    """
    named = os.environ.get("INFERACTORS_LLAMA_SERVER")
    if named:
        path = Path(named)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BackendError(f"INFERACTORS_LLAMA_SERVER={named} is not an executable file")
        return path.resolve()
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path).resolve()
    cached = cached_binary()
    return cached if cached.is_file() and os.access(cached, os.X_OK) else None


def ensure_llama_server(
    progress: TextIO = sys.stderr, *, build_command: Sequence[str] | None = None
) -> Path:
    """Locate a llama-server, building the pinned one into the cache if there is none.

    The build takes about 5 minutes on 2 cores; progress goes to ``progress`` (a line
    rewritten with ``\\r`` on a terminal, a line per 10 % elsewhere) and the full log to
    ``<cache>/llama-server/<key>/build.log``. Concurrent callers wait on a file lock and
    reuse the first build. A build that fails or is interrupted removes its half-built tree
    (`SCRATCH`) before the exception goes on; a second Ctrl-C during that removal is ignored.
    ``build_command`` (argv), when given, runs in place of the download and the compile,
    with the build directory as its last argument, which it must leave holding
    ``bin/llama-server``; its ``[done/total]`` lines are the progress. Its binary is cached
    as the pinned build's would be: a caller that passes one uses a cache of its own
    (``$INFERACTORS_CACHE_DIR``), as the tests do.

    Raises:
        BackendError: the download or the build failed; the message names the log and
            what to install.
        KeyboardInterrupt: Ctrl-C during the build (the partial tree is already removed).
    """
    found = locate_llama_server()
    if found is not None:
        return found
    root = make_reachable_dir(cached_binary().parent.parent)
    with _build_lock(root / ".lock"):
        if cached_binary().is_file():
            return cached_binary()
        try:
            _build(root, progress, build_command)
        except BaseException:
            _without_interrupts(lambda: remove_scratch(root))
            raise
    return cached_binary()


def remove_scratch(root: Path) -> None:
    """Remove what a build writes under ``root`` besides its log and the finished binary:
    the download, the sources, the objects (`SCRATCH`) and a half-copied binary."""
    for scratch in SCRATCH:
        shutil.rmtree(root / scratch, ignore_errors=True)
    cached_binary().with_suffix(".partial").unlink(missing_ok=True)


def _without_interrupts(work: Callable[[], None]) -> None:
    """Run ``work`` with SIGINT ignored (in the main thread; elsewhere as is), so a second
    Ctrl-C cannot leave the removal half done."""
    if threading.current_thread() is not threading.main_thread():
        work()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        work()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(root: Path, progress: TextIO, command: Sequence[str] | None) -> None:
    log_path, build = root / "build.log", root / "build"
    for tool in () if command else ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise BackendError(f"building llama-server needs {tool} on PATH; install {_NEEDS}")
    remove_scratch(root)  # a build killed outright (SIGKILL, power) left its tree behind
    say = _Progress(progress)
    say.line(f"inferactors: building llama-server from {PINNED_SDIST} (about 5 min on 2 cores)")
    say.line(f"inferactors: build log: {log_path}")
    with log_path.open("w") as log:
        if command:
            build.mkdir()
            _compile([*command, str(build)], log, say)
        else:
            source = _fetch_source(root, log, say)
            configure = ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja"]
            _run([*configure, *_CMAKE_FLAGS], log)
            say.line("inferactors: configured; compiling")
            _compile(
                ["cmake", "--build", str(build), "--target", "llama-server", "-j", _jobs()],
                log,
                say,
            )
    built = build / "bin" / "llama-server"
    target = cached_binary()
    make_reachable_dir(target.parent)
    shutil.copy2(built, target.with_suffix(".partial"))
    target.with_suffix(".partial").chmod(0o755)
    os.replace(target.with_suffix(".partial"), target)
    remove_scratch(root)  # 330 MB of sources and objects, not needed again
    say.line(f"inferactors: llama-server ready at {target}")


def _fetch_source(root: Path, log: TextIO, say: _Progress) -> Path:
    source = root / "src" / _SDIST_DIR / "vendor" / "llama.cpp"
    if source.is_dir():
        return source
    downloads = root / "dl"
    say.line(f"inferactors: downloading the {PINNED_SDIST} source distribution")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python"]
    _run([*pip, "-d", str(downloads), PINNED_SDIST], log)
    archive = downloads / f"{_SDIST_DIR}.tar.gz"
    prefix = f"{_SDIST_DIR}/vendor/llama.cpp/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        extract_data(tar, root / "src", members)
    return source


def _compile(argv: list[str], log: TextIO, say: _Progress) -> None:
    """Run the compile ``argv``, its ``[done/total]`` lines as progress; an interruption
    (Ctrl-C reaches the compiler too, but a lone SIGINT to us may not) kills it and waits."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        try:
            _follow(proc.stdout, log, say)
        except BaseException:
            proc.kill()
            raise
    if proc.returncode != 0:
        say.line("")
        raise BackendError(f"the llama-server build failed; see {log.name}; it needs {_NEEDS}")
    say.line("")


def _follow(lines: Iterator[str], log: TextIO, say: _Progress) -> None:
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    for line in lines:
        log.write(line)
        match = step.match(line)
        if match:
            done, total = int(match.group(1)), int(match.group(2))
            say.step(
                f"inferactors: compiling llama-server {100 * done // total:3d}% ({done}/{total})"
            )


def _run(argv: list[str], log: TextIO) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise BackendError(
            f"{argv[0]} {argv[1]} failed with status {result.returncode}; see {log.name}; "
            f"building llama-server needs network access to PyPI and {_NEEDS}"
        )


def _jobs() -> str:
    return str(max(1, len(os.sched_getaffinity(0))))


class _Progress:
    """Progress on a terminal rewrites one line; elsewhere it prints every 10 %."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = ""

    def line(self, text: str) -> None:
        if text or self._tty:
            self._stream.write(("\r" if self._tty else "") + text + "\n")
        self._stream.flush()

    def step(self, text: str) -> None:
        if self._tty:
            self._stream.write("\r" + text)
            self._stream.flush()
            return
        decile = text.split("%")[0][-3:].strip()
        bucket = str(int(decile) // 10) if decile.isdigit() else decile
        if bucket != self._last:
            self._last = bucket
            self._stream.write(text + "\n")
            self._stream.flush()
