import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "fixtures" / "models"


@pytest.fixture
def models_dir() -> Path:
    return MODELS


def target(name: str) -> str:
    return f"{MODELS / name}"


sys.path.insert(0, str(Path(__file__).parent))
