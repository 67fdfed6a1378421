import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = "fixtures/models/validation_tiny.py"

sys.path.insert(0, str(Path(__file__).parent))
