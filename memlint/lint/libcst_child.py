"""A long-lived child process that runs libcst for :mod:`memlint.lint.newer_syntax`.

libcst's native parser can crash the process it runs in (SIGSEGV on deep
nesting, see :mod:`memlint.lint.libcst_limits`) or take minutes. So it runs
in a child process, ``python -I`` (neither the user's directory nor
``PYTHON*`` variables reach its imports), under an address-space limit
(``RLIMIT_AS``), and each request has a wall-clock limit after which the
child is killed. A crash, a timeout or a malformed reply costs that one
request: the next one starts a fresh child.

The child lives as long as the process that started it (one per lint
worker), so libcst is imported once per process, not once per file:
starting a child and importing libcst cost 0.34-0.39 s on this project's
2-core machine under load, a request for a 6-line file 2.2 ms afterwards
(docs/performance.md records the measurement). It reads requests on stdin and ends at end of file, so it
does not outlive its parent. A process forked from the owner does not
share the owner's child (the pipes would interleave): it starts its own.

Protocol: each message is an 8-byte big-endian length and that many bytes;
a request is the source (UTF-8, surrogates passed through), a reply one
JSON object (:func:`memlint.lint.downlevel.answer`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

_HEADER = 8


class ChildFailed(Exception):
    """The child gave no reply: the message says why (a short phrase)."""


class _Child:
    """One running child process and its pipes."""

    def __init__(self, address_space_bytes: int) -> None:
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        command = [sys.executable, "-I", "-c",
                   f"import sys; sys.path.insert(0, {package_root!r}); "
                   f"from memlint.lint.libcst_child import serve; serve({address_space_bytes})"]
        self.owner = os.getpid()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, close_fds=True)

    def ask(self, payload: bytes, timeout: float, limit: int) -> bytes:
        deadline = time.monotonic() + timeout
        try:
            self.process.stdin.write(len(payload).to_bytes(_HEADER, "big") + payload)
            self.process.stdin.flush()
        except OSError:
            raise ChildFailed(self._ended()) from None
        size = int.from_bytes(self._read(_HEADER, deadline), "big")
        if size > limit:
            raise ChildFailed("the libcst process sent too much")
        return self._read(size, deadline)

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, needed = [], size
        stream = self.process.stdout.fileno()
        while needed:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stream], [], [], left)[0]:
                raise ChildFailed("timeout")
            chunk = os.read(stream, min(needed, 1 << 20))
            if not chunk:
                raise ChildFailed(self._ended())
            chunks.append(chunk)
            needed -= len(chunk)
        return b"".join(chunks)

    def _ended(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "the libcst process stopped answering"
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        return f"the libcst process ended with {how}"

    def close(self) -> None:
        """Kill the child (if it is still running) and reap it."""
        if self.owner != os.getpid():
            return  # a forked copy: the child is the owner's
        try:
            self.process.kill()
        except OSError:
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


_child: _Child | None = None
_LOCK = threading.Lock()


def ask(source: str, timeout: float, address_space_bytes: int, limit: int) -> dict:
    """The child's JSON reply (a dict) to ``source``.

    Raises:
        ChildFailed: the child could not start, crashed, took more than
            ``timeout`` seconds (it is killed), sent more than ``limit``
            bytes or no valid JSON object; the message says which.
    """
    with _LOCK:  # one request at a time on the pipes (the language server may lint from threads)
        return _ask(source, timeout, address_space_bytes, limit)


def _ask(source: str, timeout: float, address_space_bytes: int, limit: int) -> dict:
    global _child
    if _child is not None and _child.owner != os.getpid():
        _child = None  # inherited through fork: not ours to use
    if _child is None:
        import atexit

        try:
            _child = _Child(address_space_bytes)
            atexit.register(_child.close)
        except OSError as exc:
            raise ChildFailed(f"cannot start the libcst process: {exc.strerror or exc}") from None
    child = _child
    try:
        raw = child.ask(source.encode("utf-8", "surrogatepass"), timeout, limit)
    except ChildFailed as exc:
        _child = None
        child.close()
        if str(exc) == "timeout":
            raise ChildFailed(f"libcst took over {timeout:g} s") from None
        raise
    try:
        reply = json.loads(raw)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        _child = None
        child.close()
        raise ChildFailed("the libcst process sent no valid reply")
    return reply


def close() -> None:
    """Stop this process's child, if any (the next :func:`ask` starts one)."""
    global _child
    if _child is not None:
        _child.close()
        _child = None


def serve(address_space_bytes: int) -> None:
    """The child's loop: answer requests until end of input."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    except (ValueError, OSError):
        pass  # a lower hard limit already applies
    from memlint.lint.downlevel import answer

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = requests.read(_HEADER)
        if len(header) < _HEADER:
            return
        source = requests.read(int.from_bytes(header, "big")).decode("utf-8", "surrogatepass")
        try:
            reply = answer(source)
        except Exception as exc:  # noqa: BLE001 - e.g. MemoryError under RLIMIT_AS: this request fails, not the child
            reply = {"failed": type(exc).__name__}
        data = json.dumps(reply).encode("utf-8")
        replies.write(len(data).to_bytes(_HEADER, "big") + data)
        replies.flush()
