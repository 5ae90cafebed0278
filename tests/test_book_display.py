"""How an executed notebook shows its tables and results (`book.display`, `book.static.with_results`): a frame the
notebook wrote is shown as the page rendered from source shows that result (merged cells, `—` for a missing value,
parts that fit, diagnostics folded); any other frame is fitted and folded; on the executed page each result's
cell shows its provenance and the committed table or figure in place of what the kernel drew, and what it printed
stays, its progress bars folded at their last state."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path

import nbformat
import pandas as pd
from IPython.core.interactiveshell import InteractiveShell

from xmr_core.book import display, static, tables
from xmr_core.sources import digest_bytes


def _wide(rows: int = 3) -> pd.DataFrame:
    """A table as the chapters write it: paper / ours / std per metric, some paper values missing."""
    frame = {"model": [f"model {i}" for i in range(rows)]}
    for m in range(10):
        frame[f"R@{m} (paper)"] = [math.nan if i == 0 else 40.0 + m for i in range(rows)]
        frame[f"R@{m} (scenes)"] = [50.0 + i + m / 10 for i in range(rows)]
        frame[f"R@{m} std"] = [0.25] * rows
    return pd.DataFrame(frame)


def _cells(text: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", text)]


def test_a_written_frame_is_shown_as_its_result() -> None:
    frame = _wide()
    csv = display.csv_bytes(frame)
    display.remember(csv, "demo/table1", "Table 1 of the demo.")
    shown = display.fitted_html(frame)
    assert shown == tables.frame_result_html(pd.read_csv(io.BytesIO(csv)), "demo/table1", "Table 1 of the demo.")
    assert "Table 1 of the demo." in shown and "<details" not in shown  # a headline table, open
    cells = _cells(shown)
    assert "— · 50.0 ± 0.2" in cells and "nan" not in " ".join(cells).lower()
    assert len(re.findall(r"<table", shown)) > 1 and "Part 1 of" in shown  # 10 merged metrics do not fit in one part
    for part in re.findall(r"<table.*?</table>", shown):  # each part repeats the model column
        assert "<th>model</th>" in part
    diagnostic = frame.assign(seed=0)
    display.remember(display.csv_bytes(diagnostic), "demo/per_seed", "Every seed.")
    assert display.fitted_html(diagnostic).startswith('<details class="xmr-result xmr-diagnostic">')


def test_other_frames_are_fitted_working_tables() -> None:
    small = pd.DataFrame({"split": ["train", "test"], "images": [800, 200]})
    assert "<details" not in display.fitted_html(small) and "xmr-table" in display.fitted_html(small)
    wide = _wide(rows=150).set_index("model")  # never written: a working table, its index kept as a column
    shown = display.fitted_html(wide)
    assert shown.startswith("<details") and "150 rows × 31 columns" in shown
    assert "The first 100 of 150 rows." in shown and ">model 99<" in shown and ">model 100<" not in shown
    assert ">nan<" not in shown.lower()


def test_in_ipython_every_frame_is_shown_so() -> None:
    shell = InteractiveShell.instance()
    try:
        display.show_fitted_tables()
        data, _ = shell.display_formatter.format(_wide())
        assert 'class="table xmr-table"' in data["text/html"] and "model 0" in data["text/plain"]
    finally:
        shell.display_formatter.formatters["text/html"].pop(pd.DataFrame, None)
        InteractiveShell.clear_instance()


def _output(kind: str, **data: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output(kind, data={"text/plain": "", **data}, **({"execution_count": 3}
                                                                          if kind == "execute_result" else {}))


def test_an_executed_page_shows_its_results_as_a_page_rendered_from_source(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "demo").mkdir(parents=True)
    _wide().to_csv(results / "demo" / "table1.csv", index=False)
    (results / "demo" / "fig.png").write_bytes(b"\x89PNG committed")
    table_cell = 'write_table(table1, "demo/table1", run=run)\nprint("tuned")\ntable1'
    metas = {
        "demo/table1": {"kind": "table", "caption": "Table 1 of the demo.", "profile": "cpu", "created_utc": "1",
                        "cell": digest_bytes(table_cell.encode())},
        "demo/fig": {"kind": "figure", "caption": "The demo's `curve`.", "profile": "cpu", "created_utc": "2",
                     "cell": digest_bytes(b"draw()")},
        "demo/other": {"kind": "table", "caption": "Written by a helper.", "profile": "cpu", "created_utc": "3"},
        # a figure and a table of one key: one provenance, the table's, written by another cell
        "demo/both": {"kind": "table", "caption": "Both.", "profile": "cpu", "created_utc": "4",
                      "cell": digest_bytes(b"train()")},
    }
    (results / "demo" / "both.png").write_bytes(b"\x89PNG both")
    _wide().to_csv(results / "demo" / "both.csv", index=False)
    _wide().to_csv(results / "demo" / "other.csv", index=False)
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Demo"),
                                           nbformat.v4.new_code_cell(table_cell), nbformat.v4.new_code_cell("draw()"),
                                           nbformat.v4.new_code_cell("train()"),
                                           nbformat.v4.new_code_cell('write_figure(fig, "demo/both", run=run)')])
    book.cells[1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="tuned\n"),
        _output("execute_result", **{"text/html": '<table class="dataframe"><td>nan</td></table>'}),
    ]
    book.cells[2].outputs = [_output("display_data", **{"image/png": base64.b64encode(b"drawn").decode()})]
    book.cells[3].outputs = [nbformat.v4.new_output("stream", name="stderr", text=t)
                             for t in ("\repoch 1: 10%", "\repoch 1: 100%\n", "\repoch 2: 50%", "\repoch 2: 100%\n")]
    book.cells[3].outputs.insert(1, nbformat.v4.new_output("stream", name="stdout", text="run 1 done\n"))
    book.cells[4].outputs = [_output("display_data", **{"image/png": base64.b64encode(b"both").decode()})]
    page = static.with_results(book, results, metas, {})

    def html(cell: nbformat.NotebookNode) -> str:
        return "\n".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)

    table = book.cells[1]
    assert [o["text"] for o in table.outputs if o["output_type"] == "stream"] == ["tuned\n"]  # the print stays
    assert "dataframe" not in html(table) and "results/demo/table1" in html(table)  # the kernel's table gives way
    assert "— · 50.0 ± 0.2" in html(table) and "xmr-provenance" in html(table)
    figure = page.cells[2]
    assert all("image/png" not in o.get("data", {}) for o in figure.outputs)
    assert '<img src="../_static/results/demo/fig.png" alt="The demo&#x27;s curve.">' in html(figure)
    assert "<figcaption>" in html(figure)
    progress = page.cells[3]
    assert [o["output_type"] for o in progress.outputs] == ["display_data", "stream"]
    assert html(progress).startswith("<details") and "(2 lines)" in html(progress)
    assert "epoch 1: 100%\nepoch 2: 100%" in html(progress) and "10%" not in html(progress)
    assert progress.outputs[1]["text"] == "run 1 done\n"
    both = page.cells[4]  # shown where the figure was drawn, once
    assert all("image/png" not in o.get("data", {}) for o in both.outputs) and 'alt="Both."' in html(both)
    assert "demo/both" not in html(progress)
    assert static.UNPLACED in page.cells[-2].source and "results/demo/other" in html(page.cells[-1])
    json.dumps(page)  # still a notebook nbformat can write
    nbformat.validate(page)
