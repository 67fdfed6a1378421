import sys
from pathlib import Path

# Lets the tests here import validate_helpers.
sys.path.insert(0, str(Path(__file__).parent))
