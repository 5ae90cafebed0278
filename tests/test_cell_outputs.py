"""Code cells on a page rendered from source (not executed): a cell whose output a reader needs and cannot see
there is folded under a note that its output is in the executed book (`book.runner.shown_output`,
`book.static.fold_unseen_output`)."""

from __future__ import annotations

from pathlib import Path

from xmr_core.book import static as book_static
from xmr_core.book.runner import Notebook, shown_output

SOURCE = '''# %% [markdown]
# A demo notebook.

# %% tags=["parameters"]
PROFILE = "cpu"

# %%
fits = {"a": 1}
fits

# %%
write_table(table1, "demo/table1", run=run)
print(f"tuned: {fits}")

# %%
write_table(table2, "demo/table2", run=run)
table2

# %%
x = 1

# %%
plt.plot([1, 2]);
'''


def test_what_a_cell_shows() -> None:
    assert shown_output("fits") == "value"
    assert shown_output("x = f()\nplt.show()") == "value"
    assert shown_output("for r in rows:\n    print(r)\ny = 2") == "printed"
    assert shown_output("display(frame)") == "printed"
    assert shown_output("x = 1") == ""
    assert shown_output("plt.plot(x);") == ""  # a trailing semicolon hides the value
    assert shown_output("def (") == ""  # not Python (a magic): nothing known


def test_a_cell_whose_output_is_unseen_is_folded_with_a_note(tmp_path: Path) -> None:
    source = tmp_path / "book" / "01_demo" / "train.py"
    source.parent.mkdir(parents=True)
    source.write_text(SOURCE)
    results = tmp_path / "results"
    (results / "demo").mkdir(parents=True)
    for name in ("table1", "table2"):
        (results / "demo" / f"{name}.md").write_text("| a |\n|---|\n| 1 |\n")
    metas = {"demo/table1": {"notebook": "book/01_demo/train.py"}, "demo/table2": {"notebook": "book/01_demo/train.py"}}
    page = book_static.static_notebook(Notebook("01_demo", "train", source), "book/01_demo/train.py", results, metas, {})
    code = {cell.source.splitlines()[0]: cell for cell in page.cells if cell.cell_type == "code"}

    def notes(cell) -> list[str]:
        return [o["data"]["text/html"] for o in cell.outputs if "xmr-unexecuted" in o["data"].get("text/html", "")]

    shown = code['fits = {"a": 1}']  # shows a value, wrote nothing: folded, with the note alone
    assert "hide-input" in shown.metadata["tags"] and len(shown.outputs) == 1
    assert "is in the executed book" in notes(shown)[0] and "xmr book run 01_demo/train" in notes(shown)[0]
    printed = code['write_table(table1, "demo/table1", run=run)']  # its result shown; its print is not: a note
    assert "hide-input" not in printed.metadata.get("tags", []) and notes(printed)[0].startswith(
        '<p class="xmr-unexecuted">Its printed output')
    assert len(printed.outputs) == 3  # provenance line, the table, the note
    for first in ('write_table(table2, "demo/table2", run=run)', "x = 1", "plt.plot([1, 2]);"):
        assert notes(code[first]) == [] and "hide-input" not in code[first].metadata.get("tags", [])
    assert "hide-input" not in code['PROFILE = "cpu"'].metadata.get("tags", [])
