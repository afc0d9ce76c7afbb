"""The README says what the code does: its exit-code table is errors.EXIT_CODE_MEANINGS."""

from __future__ import annotations

from pathlib import Path

from ovm_offline.errors import EXIT_CODE_MEANINGS, ExitCode

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_exit_codes_are_the_table():
    text = README.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line.split("|")[2]]
    documented = {
        int(line.split("|")[1]): line.split("|")[3].strip() for line in rows if line.split("|")[1].strip().isdigit()
    }
    assert documented == {int(code): meaning for code, (meaning, _) in EXIT_CODE_MEANINGS.items()}
    assert set(EXIT_CODE_MEANINGS) == set(ExitCode)
