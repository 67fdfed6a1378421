"""Errors that end a memlint command with a one-line message and exit code 2.

Every user-facing failure (bad option, bad configuration key, target that
cannot be imported, shape string that does not parse) is raised as a
:class:`UsageError` subclass; ``memlint.cli.main`` prints ``memlint: error:
<message>`` on stderr and exits 2, never a traceback.
"""


class UsageError(Exception):
    """A problem with what the user asked for; the message is one line and names the culprit."""

    exit_code = 2


class ConfigError(UsageError):
    """An invalid configuration file, key or value (the message names the file and key)."""


class TargetError(UsageError):
    """An estimator/validator target that cannot be loaded, built or traced."""
