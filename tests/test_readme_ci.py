"""The README's commands are the ones CI runs."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def block(marker: str) -> str:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(f"<!-- ci:{marker} -->")
    fence = [i for i in range(start + 1, len(lines)) if lines[i].startswith("```")][:2]
    return "\n".join(lines[fence[0] + 1 : fence[1]])


def test_readme_has_one_setup_main_and_test_command() -> None:
    assert "pip install -e \".[book,dev]\"" in block("setup")
    assert block("main").strip() == "xmr book run"
    assert block("test").strip() == "pytest"


def test_ci_script_refuses_tracked_notebooks_and_reads_the_readme() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "git ls-files '*.ipynb'" in script and "block setup" in script and "block test" in script
    tracked = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    assert tracked == ""
