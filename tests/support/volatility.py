"""Running Volatility 3's `vol`, the ground truth some tests compare with."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def vol_command() -> list[str]:
    """argv that runs `vol`: from PATH, else the one installed beside this interpreter (a
    virtualenv that is not on PATH), else the CLI's entry point in this interpreter."""
    found = shutil.which("vol") or shutil.which("vol.py")
    if found:
        return [found]
    beside = Path(sys.executable).with_name("vol")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "import sys; from volatility3.cli import main; sys.exit(main())"]
