"""Where the repository keeps what tests read: the root and the pinned kernels' ISFs."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYMBOLS = REPO / "symbols"
ISF = {
    "5.10": SYMBOLS / "linux" / "debian-5.10.0-32-cloud-amd64.json.xz",
    "6.1": SYMBOLS / "linux" / "debian-6.1.0-56-cloud-amd64.json.xz",
    "6.1-rt": SYMBOLS / "linux" / "debian-6.1.0-56-rt-amd64.json.xz",
    "6.12": SYMBOLS / "linux" / "debian-6.12.117+deb12-cloud-amd64.json.xz",
    "7.2": SYMBOLS / "linux" / "debian-7.2.13+deb14-cloud-amd64.json.xz",
}
