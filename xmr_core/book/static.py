"""A chapter page from its py:percent source and the committed results, for a book with no executed notebooks.

`static_notebook` converts the source (narration and code, nothing executed) to a notebook and gives each
code cell, as outputs, the results its notebook wrote there: every table (`.md`), figure (`.png`) and
document (`claims.md`) of the results folder whose provenance names this notebook, each under a line of
its provenance, and a warning where `xmr results check` finds it stale. The cell that wrote a result is

1. the cell whose digest its provenance records (`cell`, written since results record it), else
2. the first code cell that names its key in a string (`write_table(df, "pcme/table1", ...)`,
   `write_claims(claims, "pcme", ...)`, `write_ceiling_table(..., "msrm/ceiling", ...)`), else
3. the first code cell after a narration cell that names the result in code (`table1_regions`), else
4. none: the result is shown at the end of the page, under a heading that says its cell is not known.
"""

from __future__ import annotations

import base64
import functools
import re
from pathlib import Path
from typing import Any

from xmr_core.book.runner import Notebook, written_keys
from xmr_core.book.staleness import Verdict
from xmr_core.sources import digest_bytes

UNPLACED = "Results of this notebook whose cell is not known"


def provenance_line(meta: dict[str, Any]) -> str:
    """A result's provenance as one Markdown line: profile, dataset, seed, device, commit, wall time, date,
    notebook."""
    fields = [
        ("profile", meta.get("profile")),
        ("dataset", meta.get("dataset")),
        ("seed", meta.get("seed")),
        ("device", meta.get("device")),
        ("commit", (meta.get("git_commit") or "-")[:12]),
        ("wall time", f"{meta['wall_s']} s" if meta.get("wall_s") is not None else None),
        ("written (UTC)", meta.get("created_utc")),
        ("notebook", meta.get("notebook")),
    ]
    return " · ".join(f"{name} `{value}`" for name, value in fields if value not in (None, ""))


def stale_note(verdict: Verdict | None) -> str | None:
    """One Markdown sentence for a stale or unknown result (None for a fresh one or an unchecked one)."""
    if verdict is None or verdict.status == "fresh":
        return None
    if verdict.status == "stale":
        changed = ", ".join(f"`{p}`" for p in verdict.changed)
        return f"**Stale**: its inputs changed since it was written ({changed}); rerun its notebook."
    return f"**Not checked**: {verdict.reason}."


@functools.cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _markdown_to_html(text: str) -> str:
    return _markdown().render(text)


def _html_output(html: str) -> dict[str, Any]:
    import nbformat

    return nbformat.v4.new_output("display_data", data={"text/html": html, "text/plain": ""})


def result_outputs(key: str, meta: dict[str, Any], results: Path, verdict: Verdict | None) -> list[Any]:
    """The outputs that show one result: its provenance (and stale warning), then its table or document as
    HTML and its figure as PNG, whichever files it has."""
    import nbformat

    base = results / key
    head = f'<p class="xmr-provenance"><strong>results/{key}</strong> · ' + \
           _markdown_to_html(provenance_line(meta)).strip().removeprefix("<p>").removesuffix("</p>") + "</p>"
    note = stale_note(verdict)
    if note:
        head += ('<div class="admonition warning xmr-stale"><p class="admonition-title">Stale result</p>'
                 + _markdown_to_html(note) + "</div>")
    outputs = [_html_output(head)]
    document = base.with_suffix(".md")
    if document.is_file():
        lines = document.read_text(encoding="utf-8").splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        body = _markdown_to_html("\n".join(lines)).replace("<table>", '<table class="table">')
        outputs.append(_html_output(f'<div class="xmr-result" style="overflow-x: auto">{body}</div>'))
    figure = base.with_suffix(".png")
    if figure.is_file():
        caption = meta.get("caption") or key
        outputs.append(nbformat.v4.new_output("display_data", data={
            "image/png": base64.b64encode(figure.read_bytes()).decode("ascii"), "text/plain": caption}))
    return outputs


def place_results(cells: list[tuple[str, str]], metas: dict[str, dict[str, Any]]) -> dict[str, int | None]:
    """For each result key, the index in `cells` ((cell type, source) of every cell of the notebook) of the
    code cell that wrote it, or None when no rule finds it (see the module docstring)."""
    code = [i for i, (kind, _) in enumerate(cells) if kind == "code"]
    digests = {i: digest_bytes(cells[i][1].strip().encode("utf-8")) for i in code}
    named = {i: {k.removesuffix(".md") for k in written_keys(cells[i][1])} for i in code}
    placed: dict[str, int | None] = {}
    for key, meta in metas.items():
        literal = re.compile(r"""["']""" + re.escape(key) + r"""(?:\.md)?["']""")
        mention = f"`{key.rsplit('/', 1)[-1]}`"
        by_digest = [i for i in code if meta.get("cell") and digests[i] == meta["cell"]]
        by_name = [i for i in code if key in named[i] or literal.search(cells[i][1])]
        by_narration = [next((j for j in code if j > i), None) for i, (kind, text) in enumerate(cells)
                        if kind == "markdown" and mention in text]
        placed[key] = next((i for i in by_digest + by_name + by_narration if i is not None), None)
    return placed


def static_notebook(nb: Notebook, relative: str, results: Path, metas: dict[str, dict[str, Any]],
                    verdicts: dict[str, Verdict]) -> Any:
    """The notebook `nb` (at `relative`, e.g. `book/01_pcme/train.py`) as an unexecuted notebook with the
    results `metas` (key -> provenance, those that name this notebook) as outputs of the cells that wrote
    them; `verdicts` (key -> staleness) marks the stale ones."""
    import jupytext
    import nbformat

    book = jupytext.read(nb.source, fmt="py:percent")
    book.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    placed = place_results([(cell.cell_type, cell.source) for cell in book.cells], metas)
    order = sorted(metas, key=lambda k: (str(metas[k].get("created_utc")), k))
    for key in order:
        if placed[key] is not None:
            book.cells[placed[key]].outputs += result_outputs(key, metas[key], results, verdicts.get(key))
    banner = nbformat.v4.new_markdown_cell(
        f"```{{note}}\nThis page is `{relative}` as written, **not executed**: under each cell are the committed"
        f" results it wrote (from `{results.name}/`, each with its provenance); its other outputs (printed"
        f" values, progress) are not shown. `xmr book run {nb.label}` executes it.\n```")
    first = 1 if book.cells and book.cells[0].cell_type == "markdown" else 0
    book.cells.insert(first, banner)
    unplaced = [key for key in order if placed[key] is None]
    if unplaced:
        book.cells.append(nbformat.v4.new_markdown_cell(
            f"## {UNPLACED}\n\nWritten by this notebook through a library call whose key its source does not"
            " name, so the cell is not known:"))
        cell = nbformat.v4.new_code_cell("# results written by library calls of this notebook")  # an empty cell is dropped
        for key in unplaced:
            cell.outputs += result_outputs(key, metas[key], results, verdicts.get(key))
        cell.metadata["tags"] = ["remove-input"]
        book.cells.append(cell)
    return book
