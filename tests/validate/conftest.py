import sys
from pathlib import Path

import pytest

# Lets the tests here import validate_helpers.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def at_repo_root(monkeypatch):
    """Run the test from the repository root (records name their workloads relative to it)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
