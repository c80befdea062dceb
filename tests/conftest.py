import sys
from pathlib import Path

# make tests/notebook_runner.py importable from every test module
sys.path.insert(0, str(Path(__file__).resolve().parent))
