"""Warnings that the user's model and its libraries emit while memlint builds and traces it.

Building a model from a config and tracing its step makes libraries talk:
transformers logs config checks and loss choices (through Python's logging,
to its own stderr handler), torch issues ``warnings.warn``. Printed as they
come they repeat for every trace of ``--max-batch-size`` and ``--advise`` and
bury the estimate. :class:`CapturedWarnings` collects them instead:

* ``warnings.warn`` calls that the warning filters in force would show,
  recorded with ``warnings.catch_warnings(record=True)``, attributed to the
  package of the file that issued them;
* everything else written to ``sys.stderr`` (logging handlers, prints of the
  model's code), attributed to the logger's top-level name when a logging
  handler wrote it. The stream is swapped for the duration; what memlint's own
  modules write still goes straight through (the ``memlint: ...`` lines).

:meth:`CapturedWarnings.summary` is the one line printed afterwards; the
distinct messages with their counts go to ``--format json`` as
``captured_warnings``.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field

#: Longest message text kept, in characters (a choice of ours: one terminal line
#: or two; tracebacks that libraries print are cut there).
MAX_MESSAGE_CHARS = 300


@dataclass
class Captured:
    """One distinct message: who emitted it (a package or logger name, or "stderr"), its text, how often."""

    source: str
    message: str
    count: int = 1

    def to_json(self) -> dict:
        return {"source": self.source, "message": self.message, "count": self.count}


def package_of(filename: str) -> str:
    """The top-level package of a source file (``.../site-packages/transformers/x.py`` -> ``transformers``),
    else the file's base name."""
    parts = os.path.normpath(filename).split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            index = parts.index(marker)
            return parts[index + 1].removesuffix(".py")
    return os.path.basename(filename) or "python"


def _logger_name(frame) -> str | None:
    """The top-level logger name when ``frame`` is inside a logging handler's ``emit`` (its ``record`` local)."""
    while frame is not None:
        record = frame.f_locals.get("record") if frame.f_code.co_name in ("emit", "handle") else None
        if record is not None and hasattr(record, "name"):
            return str(record.name).split(".")[0] or "logging"
        frame = frame.f_back
    return None


def real_stderr():
    """``sys.stderr`` as it was before any capture (memlint's own progress goes there)."""
    stream = sys.stderr
    while isinstance(stream, _StderrCapture):
        stream = stream.stream
    return stream


class _StderrCapture:
    """A stand-in for ``sys.stderr``: collects writes per source while active, else passes them on."""

    def __init__(self, stream, sink):
        self.stream = stream
        self.sink = sink
        self.active = True

    def write(self, text: str) -> int:
        caller = sys._getframe(1)
        if not self.active or caller.f_globals.get("__name__", "").startswith("memlint"):
            return self.stream.write(text)
        self.sink(_logger_name(caller) or "stderr", text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.stream, name)


@dataclass
class CapturedWarnings:
    """Context manager collecting warnings and stderr output (see the module docstring).

    It may be entered again after it exits (one estimate's traces, then the
    advisor's); the items accumulate. Left by an exception, it prints its
    :meth:`summary` on stderr at once, since no report will follow.
    """

    items: list[Captured] = field(default_factory=list)
    _pending: dict = field(default_factory=dict)

    def __enter__(self) -> "CapturedWarnings":
        self._catcher = warnings.catch_warnings(record=True)
        self._records = self._catcher.__enter__()
        self._previous = sys.stderr
        self._proxy = _StderrCapture(sys.stderr, self._collect_text)
        sys.stderr = self._proxy
        return self

    def __exit__(self, *exc) -> bool:
        self._proxy.active = False  # handlers made meanwhile keep the proxy: from now on it passes through
        if sys.stderr is self._proxy:
            sys.stderr = self._previous
        self._catcher.__exit__(*exc)
        for record in self._records:
            self._add(package_of(record.filename), f"{record.category.__name__}: {record.message}")
        for source, text in self._pending.items():
            for line in text.splitlines():
                if line.strip():
                    self._add(source, line.strip().removeprefix(f"[{source}] "))  # transformers' own prefix
        self._pending.clear()
        if exc[0] is not None and self.items:  # the run ends here: what was captured may explain why
            from memlint.report.text import printable  # noqa: PLC0415

            print(f"memlint: {printable(self.summary())}", file=self._previous)
        return False

    def _collect_text(self, source: str, text: str) -> None:
        self._pending[source] = self._pending.get(source, "") + text

    def _add(self, source: str, message: str) -> None:
        message = message[:MAX_MESSAGE_CHARS]
        for item in self.items:
            if item.source == source and item.message == message:
                item.count += 1
                return
        self.items.append(Captured(source, message))

    def summary(self, doing: str = "while building and tracing the model") -> str | None:
        """One line: ``3 warnings from transformers while building and tracing the model (not shown; first: ...)``;
        None when nothing was captured. Counts are of distinct messages."""
        if not self.items:
            return None
        counts: dict[str, int] = {}
        for item in self.items:
            counts[item.source] = counts.get(item.source, 0) + 1
        origins = {source: "written to stderr" if source == "stderr" else f"from {source}" for source in counts}
        total = len(self.items)
        if len(counts) == 1:
            head = f"{total} warning{'s' if total != 1 else ''} {origins[self.items[0].source]}"
        else:
            head = f"{total} warnings ({', '.join(f'{n} {origins[s]}' for s, n in counts.items())})"
        return f"{head} {doing} (not shown; in --format json's captured_warnings); first: {self.items[0].message}"
