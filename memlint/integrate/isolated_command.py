"""Run ``memlint estimate`` / ``memlint validate`` in a child process of their own.

Both commands import and run the target named on their command line. Run in
the memlint process, a target that aborts, is killed or forks would take
memlint with it or outlive it (docs/security.md). So the command line is run
again as ``python -m memlint ...`` in a new session and process group, with
its standard streams inherited (its tables, progress lines and errors reach
the terminal as before), the memory limit of ``--estimate``
(:func:`memlint.integrate.isolation.default_memory_limit`, ``RLIMIT_DATA``
set in the child before it starts), and a wall-clock limit of the command's
own ``--timeout`` plus :data:`GRACE_SECONDS` (the child stops itself at
``--timeout``; the grace covers starting Python and torch). When the child
ends, however it ends, its whole process group is killed, so nothing the
target started outlives the command. A child killed by a signal gives one
error line naming the command and target, and exit status 2.

POSIX only; elsewhere the command runs in the memlint process as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

#: Environment variable set in the child, so that it runs the command itself.
CHILD_MARKER = "MEMLINT_ISOLATED_COMMAND"
#: Seconds past ``--timeout`` the parent waits before it kills the child's group: starting
#: Python and importing torch take 2-10 s on a loaded 2-core machine; the child's own
#: timeout (memlint.estimate.cli) ends a well-behaved run first.
GRACE_SECONDS = 60.0
#: How often the parent checks the clock (seconds).
POLL_SECONDS = 0.2


def should_isolate() -> bool:
    """True in the memlint process on a POSIX host; False in the isolated child itself."""
    return os.name == "posix" and os.environ.get(CHILD_MARKER) != "1"


def run_isolated(argv: list[str], command: str, target: str, timeout_seconds: float) -> int:
    """Run ``memlint argv`` in a child (see module docstring); its exit status, or 2 with one
    error line on stderr when it was killed or passed ``timeout_seconds`` + :data:`GRACE_SECONDS`."""
    from memlint.integrate.isolation import _kill_group, default_memory_limit, exit_reason
    from memlint.integrate.worker import limit_resources

    memory = default_memory_limit()
    env = {**os.environ, CHILD_MARKER: "1"}
    child = subprocess.Popen([sys.executable, "-m", "memlint", *argv], env=env, start_new_session=True,
                             preexec_fn=lambda: limit_resources(memory))
    deadline = time.monotonic() + timeout_seconds + GRACE_SECONDS
    try:
        while child.poll() is None:
            if time.monotonic() > deadline:
                _kill_group(child.pid)
                child.wait()
                print(f"memlint: error: {command} {target}: passed {timeout_seconds + GRACE_SECONDS:g} s; "
                      "its processes were stopped", file=sys.stderr)
                return 2
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        _kill_group(child.pid)
        child.wait()
        print("memlint: interrupted", file=sys.stderr)
        return 130
    finally:
        _kill_group(child.pid)  # what the target forked, also after a normal exit
    status = child.returncode
    if status < 0:
        print(f"memlint: error: {command} {target}: the process running the target {exit_reason(status)}",
              file=sys.stderr)
        return 2
    return status
