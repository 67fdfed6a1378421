"""Estimate targets from the linted tree: checked statically, before anything runs.

A configured target (``# memlint: estimate target=...`` or
``[tool.memlint.estimate] target``) comes from the tree, so it may name only
code of the tree's project:

- ``path/to/file.py:factory`` -- relative to the script's directory (a
  comment) or the pyproject's (the table), else to the project root; the
  resolved file (symbolic links followed) must lie inside the project root,
  be a regular file and end in ``.py``: ``/dev/zero:f``, ``../../x.py:f``
  out of the project, ``data.bin:f`` are errors, and nothing is opened;
- ``package.module:factory`` -- only when ``package/module.py`` (or
  ``package/module/__init__.py``) is a file of the project; the estimate
  child imports it from there and checks that the import found that file
  (not a standard-library, frozen or installed module of the same name).

A target named with ``--estimate-target`` on the command line is trusted as
the user's own choice: it may be an absolute path or an installed or
standard-library callable (``torchvision.models:resnet18``); it must still
be a Python file when it is a path. ``memlint estimate`` and ``memlint
validate`` take their target from the command line and use
:func:`check_target_text` for the same file checks.

The project root (:func:`project_root`) is the directory of the
configuration file when the script lies under it, else the nearest directory
at or above the script with a project marker (:data:`PROJECT_MARKERS`), else
the script's own directory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memlint.errors import TargetError

#: Files or directories that mark a project's root (PEP 518's pyproject.toml,
#: setuptools' setup.py/setup.cfg, a git work tree).
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")

_PYTHON_SUFFIX = ".py"


@dataclass(frozen=True)
class ResolvedTarget:
    """A target that passed the checks: what the estimate child loads.

    ``spec``: the target as :func:`memlint.estimate.workload.load_workload`
    takes it (an absolute file path, or the dotted module name, then
    ``:factory``); ``module_file``: for a module target of the project, the
    file the import must find; ``search_dir``: the directory put first on
    ``sys.path`` for that import.
    """

    text: str
    spec: str
    module_file: str | None = None
    search_dir: str | None = None


def split_target(text: str) -> tuple[str, str]:
    """``(where, factory)`` of ``where:factory``.

    Raises:
        TargetError: no ``:``, or a factory that is not an identifier.
    """
    where, sep, factory = text.rpartition(":")
    if not sep or not where:
        raise TargetError(f"target {text!r} must be path/to/file.py:factory or package.module:factory")
    if not factory.isidentifier():
        raise TargetError(f"target {text!r}: {factory!r} is not a factory name")
    return where, factory


def is_path_target(where: str) -> bool:
    """True when ``where`` names a file rather than a dotted module."""
    return where.endswith(_PYTHON_SUFFIX) or "/" in where or "\\" in where or not _is_dotted_name(where)


def _is_dotted_name(where: str) -> bool:
    return all(part.isidentifier() for part in where.split("."))


def check_python_file(path: Path, target: str) -> None:
    """``path`` must end in ``.py`` and be a regular file; nothing is opened.

    Raises:
        TargetError: naming the target and what is wrong.
    """
    if path.suffix != _PYTHON_SUFFIX:
        raise TargetError(f"target {target!r}: {path} is not a Python file (the name must end in .py)")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TargetError(f"target {target!r}: file {path} not found ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(info.st_mode):
        raise TargetError(f"target {target!r}: {path} is not a regular file")


def check_target_text(text: str) -> None:
    """The checks for a target typed on the command line (``memlint estimate``
    / ``validate``): a path target must be a regular ``.py`` file.

    Raises:
        TargetError: a malformed target or a path that is not a Python file.
    """
    where, _ = split_target(text)
    if is_path_target(where):
        check_python_file(Path(where), text)


def project_root(script: str, config_path: Path | None) -> Path:
    """The project root of ``script`` (see the module docstring); resolved."""
    directory = Path(os.path.abspath(script)).parent.resolve()
    if config_path is not None:
        config_dir = config_path.parent.resolve()
        if _is_inside(directory, config_dir):
            return config_dir
    for candidate in (directory, *directory.parents):
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    return directory


def _is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_target(text: str, base_dir: Path, root: Path, trusted: frozenset[str] = frozenset()) -> ResolvedTarget:
    """Check a configured target and say what to load (see the module docstring).

    ``base_dir``: the directory relative paths start from; ``root``: the
    project root; ``trusted``: the targets named with ``--estimate-target``.

    Raises:
        TargetError: one line naming the target and why it cannot be used.
    """
    where, factory = split_target(text)
    if text in trusted:
        return _trusted_target(text, where, factory, base_dir)
    if is_path_target(where):
        return _project_file_target(text, where, factory, base_dir, root)
    return _project_module_target(text, where, factory, base_dir, root)


def _trusted_target(text: str, where: str, factory: str, base_dir: Path) -> ResolvedTarget:
    if not is_path_target(where):
        return ResolvedTarget(text, text)
    path = Path(where)
    if not path.is_absolute() and (base_dir / path).exists():
        path = base_dir / path
    check_python_file(path, text)
    return ResolvedTarget(text, f"{path.resolve()}:{factory}")


def _outside(text: str, detail: str) -> TargetError:
    return TargetError(f"target {text!r}: {detail}; configured targets must be files of the project "
                       f"(name it with --estimate-target {text!r} to allow it)")


def _project_file_target(text: str, where: str, factory: str, base_dir: Path, root: Path) -> ResolvedTarget:
    relative = Path(where)
    if relative.is_absolute():
        raise _outside(text, "an absolute path")
    if relative.suffix != _PYTHON_SUFFIX:
        raise TargetError(f"target {text!r}: {where} is not a Python file (the name must end in .py)")
    looked = []
    for directory in dict.fromkeys((base_dir, root)):
        candidate = (directory / relative).resolve()
        if not _is_inside(candidate, root):
            raise _outside(text, f"{candidate} is outside the project root {root}")
        if os.path.lexists(candidate):
            check_python_file(candidate, text)
            return ResolvedTarget(text, f"{candidate}:{factory}")
        looked.append(str(directory))
    raise TargetError(f"target {text!r}: file {where} not found (looked in {', '.join(looked)})")


def _project_module_target(text: str, where: str, factory: str, base_dir: Path, root: Path) -> ResolvedTarget:
    parts = where.split(".")
    for directory in dict.fromkeys((base_dir, root)):
        for candidate in (directory.joinpath(*parts).with_suffix(_PYTHON_SUFFIX),
                          directory.joinpath(*parts, "__init__.py")):
            if not os.path.lexists(candidate):
                continue
            real = candidate.resolve()
            if not _is_inside(real, root):
                raise _outside(text, f"{candidate} leads outside the project root {root}")
            check_python_file(real, text)
            return ResolvedTarget(text, text, module_file=str(real), search_dir=str(directory))
        if (directory / where).is_file():  # `data.bin:f` reads as a module name but names a file
            raise TargetError(f"target {text!r}: {where} is not a Python file (the name must end in .py)")
    raise _outside(text, f"module {where!r} is not a file of the project (root {root})")
