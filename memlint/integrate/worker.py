"""The estimate child: ``python -m memlint.integrate.worker REQUEST_FILE FD``.

Started by :func:`memlint.integrate.isolation.run_worker` in a process group
of its own. It limits its own memory (``RLIMIT_DATA``, inherited by whatever
it starts) and core dumps, reads the request (script, source, settings,
checked target), puts the target's directory first on ``sys.path`` (a file
target's siblings import as they do when the file runs as a script), runs
:func:`memlint.integrate.estimate_script` and writes
JSON lines to the file descriptor ``FD``: ``{"progress": text}`` while it
works, then ``{"result": ScriptEstimate.to_transfer()}`` or ``{"failure":
text}`` for an exception that escaped the estimate (``sys.exit`` included).
Anything else -- a crash, ``os._exit``, a hang -- the parent sees from the
outside.
"""

from __future__ import annotations

import json
import os
import resource
import sys

from memlint.errors import UsageError

GiB = 2**30


class _Channel:
    """The pipe to the parent, closed to any program the target executes."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)
        self.stream = os.fdopen(fd, "wb", buffering=0)

    def send(self, message: dict) -> None:
        self.stream.write(json.dumps(message).encode() + b"\n")

    def progress(self, text: str) -> None:
        self.send({"progress": text})


def limit_resources(memory: int) -> None:
    """``RLIMIT_DATA`` = ``memory`` bytes (see memlint.integrate.isolation for
    why not ``RLIMIT_AS``) and no core files (a crashing target would
    otherwise write one as large as its memory)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))


def _drop_start_directory(workdir: str) -> None:
    # `python -m` put the temporary directory it was started in first on sys.path.
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.path.abspath(workdir):
        del sys.path[0]


def import_project_module(name: str, expected_file: str, search_dir: str) -> None:
    """Import module ``name`` from ``search_dir`` and check that it is the
    project file the parent checked (not a built-in, frozen, standard-library
    or installed module of the same name).

    Raises:
        TargetError: the import found another module.
    """
    import importlib

    from memlint.errors import TargetError

    sys.path.insert(0, search_dir)
    module = importlib.import_module(name)
    found = getattr(module, "__file__", None)
    if found is None or os.path.realpath(found) != os.path.realpath(expected_file):
        where = found or "a built-in or frozen module"
        raise TargetError(f"module {name!r} resolves to {where}, not the project's {expected_file}")


def describe_exception(exc: BaseException, memory: int) -> str:
    """One line for an exception that escaped the estimate."""
    if isinstance(exc, UsageError):  # memlint's own one-line errors (a target that cannot be loaded)
        return str(exc)
    if isinstance(exc, SystemExit):
        return f"the target called sys.exit({exc.code!r})"
    if isinstance(exc, MemoryError):
        return f"ran out of memory (limit {memory / GiB:.1f} GiB, --estimate-memory)"
    if isinstance(exc, KeyboardInterrupt):
        return "was interrupted"
    lines = str(exc).strip().splitlines()
    return f"raised {type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def with_memory_hint(error: str, memory: int) -> str:
    """``error``, plus the memory limit when it reads like an allocation failure
    (Python's MemoryError, torch's DefaultCPUAllocator "can't allocate memory")."""
    if "MemoryError" in error or "can't allocate memory" in error:
        return f"{error} (memory limit {memory / GiB:.1f} GiB, --estimate-memory)"
    return error


def run(request: dict, channel: _Channel):
    """The estimate of ``request``: a ScriptEstimate (raises what the target raises)."""
    from memlint.integrate import estimate_script
    from memlint.integrate.settings import EstimateConfig

    target = request["target"]
    if target.get("module_file"):
        import_project_module(target["spec"].rpartition(":")[0], target["module_file"], target["search_dir"])
    elif os.path.isabs(target["spec"]):
        # As `python models/net.py` would: the file's siblings are importable.
        sys.path.insert(0, os.path.dirname(target["spec"].rpartition(":")[0]))
    settings = EstimateConfig.from_json(request["settings"])
    outcome = estimate_script(request["path"], request["source"], settings, target["spec"],
                              advise=request["advise"], progress=channel.progress)
    if outcome.error:
        outcome.error = with_memory_hint(outcome.error, request["memory"])
    return outcome


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring); the exit status is not the
    result: the parent reads the messages."""
    request_file, fd = argv[1], int(argv[2])
    channel = _Channel(fd)
    with open(request_file, encoding="utf-8") as handle:
        request = json.load(handle)
    limit_resources(request["memory"])
    _drop_start_directory(os.path.dirname(request_file))
    os.chdir(request["cwd"])
    try:
        outcome = run(request, channel)
    except BaseException as exc:  # noqa: BLE001 - whatever the target does is reported, in one line
        channel.send({"failure": describe_exception(exc, request["memory"])})
        return 1
    channel.send({"result": outcome.to_transfer()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
