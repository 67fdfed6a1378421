"""Find the Python files and Jupyter notebooks to lint under the paths given on the command line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from memlint.config import DEFAULT_EXCLUDE, Config

PYTHON_SUFFIXES = (".py", ".pyi")
#: What a directory walk picks up: Python files and Jupyter notebooks.
LINTED_SUFFIXES = (*PYTHON_SUFFIXES, ".ipynb")


@dataclass
class Collected:
    """Files to lint, one-line problems with paths that could not be used,
    notes on files left out, and for each file its *tree*: the resolved
    directory named on the command line that it was found in (for a file
    named itself, its resolved directory); ``--fix`` writes only inside it."""

    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    roots: dict[str, str] = field(default_factory=dict)


def collect_files(paths: list[str], config: Config) -> Collected:
    """Expand ``paths`` into Python files and notebooks (``.ipynb``), in a
    stable order, each once.

    Directories are walked without following symbolic links to directories
    (so a link loop cannot hang the walk), skipping :data:`DEFAULT_EXCLUDE`,
    virtual environments (a ``pyvenv.cfg`` inside) and ``exclude`` globs; a
    symbolic link found in the walk whose file lies outside the walked
    directory is left out with a note (a tree must not make memlint read,
    and print lines of, files elsewhere on the machine). A file named
    explicitly is linted whatever its suffix, unless an ``exclude`` glob
    matches it. A path named explicitly that is reached through a symbolic
    link (the file, or a directory on the way) whose real path lies outside
    the project the link lives in (:func:`link_root`) is not read, with a
    note; otherwise its tree is that project. A missing path is an error line.
    """
    collected = Collected()
    seen: set[str] = set()

    def add(path: str, root: str) -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            collected.files.append(path)
            collected.roots[path] = root

    for path in paths:
        if os.path.lexists(path):
            linked = link_root(path)
            if linked is not None and not is_within(os.path.realpath(path), linked):
                collected.notes.append(f"{path}: skipped: reached through a symbolic link, it is "
                                       f"{os.path.realpath(path)}, outside the project {linked}")
                continue
        if os.path.isdir(path):
            root = os.path.realpath(path)
            for found in _walk(path, config):
                if os.path.islink(found) and not is_within(os.path.realpath(found), root):
                    collected.notes.append(f"{found}: skipped: a symbolic link to a file outside {path}")
                    continue
                add(found, root)
        elif os.path.lexists(path):
            if not config.is_excluded(path):
                linked = link_root(path)
                add(path, linked or os.path.realpath(os.path.dirname(os.path.abspath(path))))
        else:
            collected.errors.append(f"{path}: no such file or directory")
    return collected


#: Files and folders that mark a project's root directory.
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def link_root(path: str) -> str | None:
    """For a path named on the command line that is reached through a
    symbolic link -- the file itself, or any directory on the way -- the
    resolved project root the link lives in; None when there is no link.

    The root is searched for *above* the deepest link of the path (the
    nearest directory with a :data:`PROJECT_MARKERS` entry, else the link's
    own directory), so that the markers of wherever the link points never
    count: ``sub/od -> /outside`` makes ``sub/od/fixme.py`` a file of
    ``/outside``, not of the project, whatever ``/outside`` holds.
    """
    lexical = os.path.normpath(os.path.abspath(path))
    current = lexical
    while not os.path.islink(current):
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    start = os.path.dirname(current)
    for candidate in _ancestors(start):
        if any(os.path.lexists(os.path.join(candidate, marker)) for marker in PROJECT_MARKERS):
            return os.path.realpath(candidate)
    return os.path.realpath(start)


def _ancestors(directory: str):
    while True:
        yield directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return
        directory = parent


def is_within(path: str, directory: str) -> bool:
    """True when the (resolved) ``path`` is ``directory`` or lies below it."""
    return os.path.commonpath([path, directory]) == directory


def _walk(root: str, config: Config):
    for directory, subdirs, filenames in os.walk(root, followlinks=False):
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in DEFAULT_EXCLUDE
            and not d.endswith(".egg-info")
            and not os.path.isfile(os.path.join(directory, d, "pyvenv.cfg"))
            and not config.is_excluded(os.path.join(directory, d))
        )
        for name in sorted(filenames):
            if name.endswith(LINTED_SUFFIXES):
                path = os.path.join(directory, name)
                if not config.is_excluded(path):
                    yield path
