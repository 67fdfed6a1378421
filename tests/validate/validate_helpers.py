"""Paths shared by the validator tests (a uniquely named module: several
test folders have a conftest.py, so `from validate_helpers import` is ambiguous)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = "fixtures/models/validation_tiny.py"
