"""The README's commands are the ones CI runs."""

import json
import re
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


def test_readme_first_screen_reads_the_book_and_says_the_data_is_synthetic() -> None:
    """A newcomer's first screen (25 lines): what the book is, synthetic data, the one-minute build and where to
    open it; the README stays under 1,200 words, and the rerun's cost comes before its command."""
    text = (ROOT / "README.md").read_text()
    first = "\n".join(text.splitlines()[:25])
    assert "synthetic" in first and "not** COCO" in first
    assert "xmr book build" in first and "book/_build/cpu/html/index.html" in first and "xmr book run" not in first
    assert len(text.split()) <= 1200
    assert text.index("core-hours") < text.index("<!-- ci:main -->")


def test_readme_counts_the_committed_results_once() -> None:
    """The one count of results the README states is that of the provenance records under results/."""
    kinds = [json.loads(p.read_text()).get("kind") for p in (ROOT / "results").glob("*/*.json")]
    stated = re.findall(r"(\d+) results \((\d+) tables, (\d+) figures, (\d+) claims pages\)",
                        (ROOT / "README.md").read_text())
    assert stated == [(str(len(kinds)), str(kinds.count("table")), str(kinds.count("figure")),
                       str(kinds.count("text")))]
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:  # no other count of the book's results
        assert not re.search(r"\d+ (?:tables and figures|results in results/)", doc.read_text()), doc
