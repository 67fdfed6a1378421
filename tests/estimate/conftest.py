import sys
from pathlib import Path

# make estimate_helpers importable whatever pytest's import mode
sys.path.insert(0, str(Path(__file__).parent))
