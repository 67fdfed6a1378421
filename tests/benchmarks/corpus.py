"""The fixed lint benchmark corpus: ~600 real files, listed in ``corpus.txt``.

Selection (deterministic, re-run only to regenerate the list on purpose):

- every ``.py`` file under the installed ``torch/`` and ``transformers/``
  packages (site-packages of the running interpreter), paths sorted;
- from each package, every k-th path with k = count // PER_PACKAGE, starting
  at the first, until PER_PACKAGE files are taken;
- every ``.py`` file under the repository's ``fixtures/`` (sorted).

``corpus.txt`` holds one path per line: ``site-packages/<relative path>`` for
installed files, ``<relative path>`` for repository files; the header records
the package versions it was made from. ``python tests/benchmarks/corpus.py``
rewrites it; the benchmarks only read it (:func:`load_corpus`).
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS_FILE = Path(__file__).with_name("corpus.txt")
PACKAGES = ("torch", "transformers")
PER_PACKAGE = 287
SITE_PREFIX = "site-packages/"


def site_packages() -> Path:
    """The running interpreter's purelib directory (where torch is installed)."""
    return Path(sysconfig.get_paths()["purelib"])


#: Directories never searched for corpus files.
SKIPPED_DIRS = frozenset({"__pycache__", "venv", "node_modules"})


def python_files(root: Path | str) -> list[str]:
    """Every ``.py`` file below ``root``, sorted; hidden directories, virtual
    environments and ``__pycache__`` are skipped."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        found.extend(os.path.join(directory, name) for name in files if name.endswith(".py"))
    return sorted(found)


def select(per_package: int = PER_PACKAGE) -> list[str]:
    """The corpus paths, as written to ``corpus.txt``."""
    site = site_packages()
    chosen = []
    for package in PACKAGES:
        files = python_files(site / package)
        stride = max(1, len(files) // per_package)
        chosen.extend(SITE_PREFIX + os.path.relpath(path, site) for path in files[::stride][:per_package])
    chosen.extend(os.path.relpath(path, REPO) for path in python_files(REPO / "fixtures"))
    return chosen


def load_corpus() -> tuple[list[str], list[str]]:
    """Absolute paths of the corpus files that exist here, and the missing ones."""
    site = site_packages()
    present, missing = [], []
    for line in CORPUS_FILE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        path = site / line[len(SITE_PREFIX):] if line.startswith(SITE_PREFIX) else REPO / line
        (present if path.is_file() else missing).append(str(path))
    return present, missing


def _versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{name} {version(name)}" for name in PACKAGES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-package", type=int, default=PER_PACKAGE)
    args = parser.parse_args()
    paths = select(args.per_package)
    header = [
        "# memlint lint benchmark corpus (tests/benchmarks/corpus.py)",
        f"# {len(paths)} files: every k-th sorted .py file of {', '.join(PACKAGES)} "
        f"({args.per_package} each) + fixtures/",
        f"# made from: {_versions()}, Python {sys.version.split()[0]}",
    ]
    CORPUS_FILE.write_text("\n".join(header + paths) + "\n", encoding="utf-8")
    print(f"wrote {len(paths)} paths to {CORPUS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
