"""The clients' own files are run by `test_clients.py` in their own processes, never collected here."""

from pathlib import Path

collect_ignore = [path.name for path in Path(__file__).parent.iterdir() if path.is_dir()]
