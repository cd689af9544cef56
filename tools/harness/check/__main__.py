"""tools/check's entry: `python3 tools/harness/check/__main__.py` or `python3 -m harness.check`."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from harness.check.cli import main
else:
    from .cli import main

sys.exit(main())
