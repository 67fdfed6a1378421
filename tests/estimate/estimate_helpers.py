"""Paths shared by the estimator tests (a uniquely named module, unlike conftest)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "fixtures" / "models"


def target(name: str) -> str:
    """Absolute ``fixtures/models/<name>`` path, to which a ``:factory`` is appended."""
    return str(MODELS / name)
