"""The notebook-logic count of `python -m xmr_core.bench notebooks`, on hand-counted notebooks."""

from __future__ import annotations

import pytest

from xmr_core.bench.notebooks import code_cells, count_lines, notebook_logic

NOTEBOOK = '''# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
# ---

# %% [markdown]
# # Title
# for x in y: not code, a markdown cell

# %% tags=["parameters"]
PROFILE = "cpu"

# %%
import pandas as pd

rows = []
for seed in (0, 1):  # a loop: 2 code lines of logic
    # a comment inside is not a code line
    rows.append(seed)
table = pd.DataFrame(rows)
best = [r for r in rows if r]  # a comprehension: 1 line
label = "a" if best else "b"  # a conditional expression: 1 line
write = print(
    table,
)
'''


def test_code_cells_skip_markdown_and_header():
    cells = code_cells(NOTEBOOK)
    assert len(cells) == 2 and cells[0].strip() == 'PROFILE = "cpu"'
    assert "Title" not in "".join(cells)


def test_logic_lines_are_counted_by_hand(tmp_path):
    # code lines: PROFILE, import, rows, for, append, table, best, label, write( , table, ) = 11; logic: 2 + 1 + 1 = 4
    path = tmp_path / "nb.py"
    path.write_text(NOTEBOOK)
    assert notebook_logic(path) == {"notebook": str(path), "code lines": 11, "logic lines": 4, "logic %": 36.4}


def test_a_cell_that_does_not_parse_names_the_file():
    with pytest.raises(SyntaxError, match="nb.py: a code cell does not parse"):
        count_lines("for x in", "nb.py")
