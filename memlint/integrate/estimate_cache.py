"""The estimate cache: an unchanged ``memlint --estimate train.py`` does not trace again.

An entry is one script's :class:`~memlint.integrate.result.ScriptEstimate`
(its transfer JSON), stored with the results cache's signed store
(:class:`memlint.lint.cache.Store`: an HMAC under the user's own key, so a
cache committed to the repository is never trusted) under a key that hashes

- the script's text (its recipe: batch size, optimizer, ... and the comment
  block) and its validated estimate settings,
- the target's file and the project files it imports, found statically
  (``import``/``from`` statements resolved to files of the project root,
  package ``__init__`` files included, transitively): an edit to the model
  code is a miss,
- ``--advise``, memlint's version and the size and modification time of its
  estimator sources, the torch version (package metadata, torch is not
  imported) and the Python version.

Not cached: failed estimates (they are re-run), and ``gpu=auto`` (the answer
depends on the machine's GPU). What a target reads at run time besides
Python imports (a JSON model config, an environment variable) is not in the
key: use ``--no-cache`` when that changes.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

from memlint import __version__
from memlint.integrate.result import MalformedResult, ScriptEstimate

#: Namespace of the estimate entries in the cache directory (bumped when the
#: entry format changes).
ENTRY_FORMAT = "estimates-v1"

#: Most project files followed from a target's imports: a larger closure is a
#: hashed prefix (a change beyond it is missed), enough for real model code.
MAX_IMPORTED_FILES = 2000


class EstimateCache:
    """Signed estimate entries in the results cache directory."""

    def __init__(self, store) -> None:
        self.store = store

    @classmethod
    def open(cls, directory: Path) -> "EstimateCache | None":
        """The cache in ``directory``; None when it cannot be used (then estimates are not cached)."""
        from memlint.lint.cache import Store

        store = Store.open(directory, hashlib.sha256(ENTRY_FORMAT.encode()).hexdigest())
        return cls(store) if store is not None else None

    def key(self, planned, target, root: Path, advise: bool) -> str | None:
        """The entry key of one planned estimate, or None when it must not be cached."""
        gpu = planned.settings.get("gpu")
        if isinstance(gpu, str) and gpu.strip().lower() == "auto":
            return None
        parts = {
            "memlint": __version__,
            "estimator": estimator_fingerprint(),
            "torch": torch_version(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "source": planned.source,
            "settings": planned.settings.to_json(),
            "target": target.spec,
            "advise": advise,
            "files": imported_files_digest(target, root),
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def load(self, key: str, path: str) -> ScriptEstimate | None:
        """The cached estimate under ``key``, re-pathed to ``path``; None on a miss."""
        payload = self.store.load_payload(key)
        if payload is None:
            return None
        try:
            outcome = ScriptEstimate.from_transfer(payload)
        except MalformedResult:
            return None
        outcome.path = path
        return outcome

    def save(self, key: str, outcome: ScriptEstimate) -> None:
        """Store a successful estimate; a failed write is ignored."""
        self.store.save_payload(key, outcome.to_transfer())


def torch_version() -> str:
    """The installed torch's version from its package metadata (no import)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def estimator_fingerprint() -> str:
    """Sizes and modification times of memlint's estimator and integration sources."""
    from memlint.lint.cache import source_fingerprint

    here = Path(__file__).resolve().parent
    return source_fingerprint([str(here.parent / "estimate"), str(here)])


#: Larger files of the closure are keyed by size and modification time, not
#: read (the linter's own limit, memlint.lint.engine.MAX_SOURCE_BYTES).
MAX_HASHED_BYTES = 2**20


def imported_files_digest(target, root: Path) -> str:
    """SHA-256 over the target file and the project files it imports (relative path and content)."""
    digest = hashlib.sha256()
    for path in sorted(imported_project_files(target, root)):
        # a target named with --estimate-target may lie outside the project: keyed by its full path
        name = path.relative_to(root) if path.is_relative_to(root) else path
        digest.update(os.fsencode(str(name)) + b"\0" + _file_digest(path))
    return digest.hexdigest()


def _file_digest(path: Path) -> bytes:
    try:
        info = path.stat()
        if info.st_size > MAX_HASHED_BYTES:
            return f"{info.st_size}:{info.st_mtime_ns}".encode()
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b"<unreadable>"


def imported_project_files(target, root: Path) -> set[Path]:
    """The target's file and, transitively, the project files its imports name."""
    start = target.module_file or target.spec.rpartition(":")[0]
    first = Path(start)
    if not first.is_file():
        return set()  # an installed module named with --estimate-target: its version is the torch/Python part
    search = [root] + ([Path(target.search_dir)] if target.search_dir else [])
    seen: set[Path] = set()
    pending = [first.resolve()]
    while pending and len(seen) < MAX_IMPORTED_FILES:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        pending.extend(p for p in _imports_of(path, [path.parent, *search], root) if p not in seen)
    return seen


def _imports_of(path: Path, search: list[Path], root: Path) -> list[Path]:
    try:
        if path.stat().st_size > MAX_HASHED_BYTES:
            return []
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        for dotted, bases in _imported_names(node, path, search):
            found.extend(_module_files(dotted, bases, root))
    return found


def _imported_names(node: ast.AST, path: Path, search: list[Path]):
    """(dotted module name, directories to resolve it in) for each module an import statement may load."""
    if isinstance(node, ast.Import):
        return [(alias.name, search) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        bases, prefix = [base], node.module or ""
    else:
        bases, prefix = search, node.module or ""
    names = [(prefix, bases)] if prefix else []
    # `from package import name` may import the submodule package.name
    names += [(f"{prefix}.{alias.name}" if prefix else alias.name, bases) for alias in node.names if alias.name != "*"]
    return names


def _module_files(dotted: str, bases: list[Path], root: Path) -> list[Path]:
    """Files of the project that importing ``dotted`` from ``bases`` runs: each
    package's ``__init__.py`` on the way and the module itself."""
    parts = dotted.split(".")
    files = []
    for base in bases:
        for depth in range(1, len(parts) + 1):
            stem = base.joinpath(*parts[:depth])
            for candidate in (stem / "__init__.py", stem.with_suffix(".py")):
                if candidate.is_file():
                    real = candidate.resolve()
                    if real == root or root in real.parents:
                        files.append(real)
    return files
