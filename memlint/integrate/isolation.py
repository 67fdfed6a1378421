"""Run one estimate in a child process of its own, within a time and a memory limit.

The estimate imports and calls code from the user's tree (the target's
factory), which may raise, exit, crash, hang or take all memory. It
therefore runs as ``python -m memlint.integrate.worker`` in a new session
and process group (``start_new_session``), with

- its standard input, output and error on ``/dev/null`` (``--verbose``:
  output and error go to memlint's standard error), so it can neither block
  on input nor write into memlint's report;
- a wall-clock limit, after which the parent kills the whole group;
- a memory limit, enforced twice: the worker sets ``RLIMIT_DATA`` on itself
  (every process it starts inherits it) and the parent adds up the resident
  memory of the group (Linux ``/proc``) every :data:`POLL_SECONDS` and kills
  the group over the limit. ``RLIMIT_AS`` is not used: it counts address
  space that is reserved but never backed (the CUDA driver alone reserves
  terabytes of it for unified addressing), so torch fails under any useful
  value; ``RLIMIT_DATA`` (Linux >= 4.7) counts private writable mappings,
  which is where malloc, torch's CPU allocator and Python's heap put what
  they use, and a failed allocation is a ``MemoryError`` (or torch's "can't
  allocate memory" error) in the worker instead of a host that swaps;
- the results sent back as JSON lines on a pipe of its own (not stdout),
  size-limited, validated by the parent.

When the estimate ends, however it ends, the parent kills the process group
(SIGKILL) before reaping the child, so that no process started by the
target outlives the run. A process that leaves the group on purpose
(``setsid``) is out of reach; so is anything it can do as the user: the
limits contain accidents and broken factories, they are not a sandbox.
POSIX only (``select`` on a pipe, process groups).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

GiB = 2**30

#: How often the parent checks the clock and the group's memory (seconds):
#: a tenth of the shortest useful timeout, and cheap (one /proc scan).
POLL_SECONDS = 0.1

#: Most bytes the worker may send back; a result is a few KiB (the advisor's
#: rows, the recipe), so more is a target writing into the pipe.
MAX_MESSAGE_BYTES = 16 * 2**20

#: Default wall-clock limit of one estimate (seconds): the design's budget is
#: 30 s for a 7B-parameter decoder; a largest-batch search (~20 traces) plus
#: the advisor (~10) stays within 600 s with room for slow machines.
DEFAULT_TIMEOUT_SECONDS = 600.0

#: Smallest ``--estimate-memory`` accepted (bytes): less cannot start Python
#: and torch (importing torch 2.x takes ~250 MiB of private memory).
MIN_MEMORY_BYTES = 256 * 2**20


def default_memory_limit() -> int:
    """Half of the host's physical memory, in bytes: an estimate traces on the
    meta device and needs little (under 2 GiB for a 7B model by the design's
    budget), and the other half stays for memlint, the other estimates'
    files and the rest of the machine. 8 GiB where the host does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (AttributeError, OSError, ValueError):
        return 8 * GiB


@dataclass(frozen=True)
class Limits:
    """What one estimate may take: wall-clock ``timeout`` seconds and ``memory`` bytes."""

    timeout: float = DEFAULT_TIMEOUT_SECONDS
    memory: int = 0

    def memory_text(self) -> str:
        """The memory limit in GiB (2**30 bytes), for messages."""
        return f"{self.memory / GiB:.1f} GiB"


def over_limit_text(used: int, limit: int) -> str:
    """``used X MiB, over its memory limit of Y MiB``, with as many decimals
    as it takes for X and Y to differ (``used 1.0 GiB, over ... of 1.0 GiB``
    read as a contradiction); bytes when they are that close."""
    mib = 2**20
    for decimals in (0, 1, 2):
        used_text, limit_text = f"{used / mib:,.{decimals}f}", f"{limit / mib:,.{decimals}f}"
        if used_text != limit_text:
            return f"used {used_text} MiB, over its memory limit of {limit_text} MiB"
    return f"used {used:,} bytes, over its memory limit of {limit:,} bytes"


class ChildFailed(Exception):
    """The worker ended without a result; the message says how, in one line."""


def run_worker(request: dict, limits: Limits, progress: Callable[[str], None] | None = None,
               verbose: bool = False) -> dict:
    """Run the worker on ``request`` and return its last message: ``{"result": ...}``
    or ``{"failure": "..."}`` (the worker's own report of an exception).

    Raises:
        ChildFailed: timeout, memory limit, crash, exit without a result,
            an oversized/undecodable message, or a worker that cannot start.
    """
    try:
        return _run_in_workdir(request, limits, progress, verbose)
    except OSError as exc:  # no temporary directory, no pipe, no interpreter to start
        raise ChildFailed(f"could not start the estimate process ({exc.strerror or type(exc).__name__})") from None


def _run_in_workdir(request: dict, limits: Limits, progress, verbose: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="memlint-estimate-") as workdir:
        request_path = Path(workdir) / "request.json"
        request_path.write_text(json.dumps({**request, "memory": limits.memory}), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        output = _stderr_fd() if verbose else subprocess.DEVNULL
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "memlint.integrate.worker", str(request_path), str(write_fd)],
                cwd=workdir, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                pass_fds=(write_fd,), start_new_session=True)
        finally:
            os.close(write_fd)
        try:
            return _supervise(child, read_fd, limits, progress)
        finally:
            _end_group(child)
            os.close(read_fd)


def _stderr_fd() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an in-memory stream
        return 2


def _supervise(child: subprocess.Popen, fd: int, limits: Limits, progress) -> dict:
    deadline = time.monotonic() + limits.timeout
    reader = _LineReader()
    pipe_open = True
    while True:
        exited = _has_exited(child)
        wait = 0.0 if exited else max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
        if pipe_open and select.select([fd], [], [], wait)[0]:
            chunk = os.read(fd, 1 << 16)
            pipe_open = bool(chunk)
            for message in reader.feed(chunk):
                if "progress" in message:
                    if progress is not None:
                        progress(str(message["progress"]))
                elif "result" in message or "failure" in message:
                    return message
        elif exited:
            raise ChildFailed(exit_reason(_exit_status(child)))
        elif not pipe_open:
            time.sleep(wait)
        # Checked on every turn, so that a stream of messages cannot hold off the limits.
        if time.monotonic() >= deadline:
            raise ChildFailed(f"did not finish within {limits.timeout:g} s (--estimate-timeout); stopped")
        used = group_rss_bytes(child.pid)
        if used > limits.memory:
            raise ChildFailed(f"{over_limit_text(used, limits.memory)} (--estimate-memory); stopped")


class _LineReader:
    """Splits the worker's byte stream into JSON messages, one per line."""

    def __init__(self) -> None:
        self.buffer = b""
        self.total = 0

    def feed(self, chunk: bytes) -> list[dict]:
        """The complete messages that ``chunk`` ends.

        Raises:
            ChildFailed: more than MAX_MESSAGE_BYTES in all, or a line that
                is not a JSON object.
        """
        self.total += len(chunk)
        if self.total > MAX_MESSAGE_BYTES:
            raise ChildFailed(f"sent more than {MAX_MESSAGE_BYTES // 2**20} MiB of results; stopped")
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        messages = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                raise ChildFailed("sent a message that is not JSON; stopped") from None
            if not isinstance(message, dict):
                raise ChildFailed("sent a message that is not a JSON object; stopped")
            messages.append(message)
        return messages


def _has_exited(child: subprocess.Popen) -> bool:
    """True once the child has exited. Where ``os.waitid`` exists (Linux) it
    is not reaped (WNOWAIT), so its process ID, which is also the group's ID,
    cannot be reused before the group is killed; elsewhere (macOS) it is."""
    if not hasattr(os, "waitid"):
        return child.poll() is not None
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _exit_status(child: subprocess.Popen) -> int:
    _kill_group(child.pid)
    return child.wait()


def _end_group(child: subprocess.Popen) -> None:
    if child.returncode is None:  # not reaped yet: its ID still names the group
        _kill_group(child.pid)
    child.wait()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def exit_reason(status: int) -> str:
    """Words for a worker that ended with ``status`` (a Popen returncode) and no result."""
    if status < 0:
        number = -status
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            return f"was killed ({name}; by the system's out-of-memory killer?)"
        description = signal.strsignal(number) or name
        return f"crashed ({name}: {description})"
    return f"exited with status {status} without a result (os._exit or a crash in the target?)"


def group_rss_bytes(pgid: int) -> int:
    """Resident memory (bytes) of the processes of group ``pgid``, from
    ``/proc/PID/stat`` (Linux, proc(5): field 5 pgrp, field 24 rss in pages);
    0 where there is no ``/proc``."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    total = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if entry.name.isdigit():
                total += _rss_if_in_group(entry.name, pgid) * page
    return total


def _rss_if_in_group(pid: str, pgid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return 0
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return int(fields[21]) if int(fields[2]) == pgid else 0
    except (IndexError, ValueError):
        return 0
