"""Every subpackage of memlint/ is listed in pyproject.toml, so a built wheel
ships it (a missing entry once left memlint.integrate out of the wheel)."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_packaged():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "memlint").rglob("__init__.py")
    } | {"memlint.rules"}
    assert found <= listed, sorted(found - listed)
