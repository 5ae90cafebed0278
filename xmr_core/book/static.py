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

A code cell whose output a reader needs (`runner.shown_output`: it prints, or ends in a value) and that no committed
result shows is folded under a note that its output is in the executed book (`fold_unseen_output`).

An executed notebook's page shows its results the same way (`with_results`): in each cell that wrote results, the
committed table or figure with its provenance in place of what the kernel drew; what the cell printed stays, its
stderr (progress bars) folded (`tidy_streams`). A figure whose drawing code changed since it was drawn says so
under its caption (`older_code_note`) until its notebook is executed again or `xmr results restyle` redraws it.
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path
from typing import Any

from xmr_core.book.runner import Notebook, shown_output, written_keys
from xmr_core.book.staleness import Verdict
from xmr_core.book.tables import folded, result_table_html
from xmr_core.config import project_root
from xmr_core.sources import digest_bytes

UNPLACED = "Results of this notebook whose cell is not known"
FIGURES = "_static/results"  # where the book build copies every result figure (`<key>.png`), from the book's root


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


def inline_html(text: str) -> str:
    """One paragraph of Markdown as inline HTML (no enclosing `<p>`)."""
    return _markdown_to_html(text).strip().removeprefix("<p>").removesuffix("</p>")


def _html_output(html: str) -> dict[str, Any]:
    import nbformat

    return nbformat.v4.new_output("display_data", data={"text/html": html, "text/plain": ""})


def result_outputs(key: str, meta: dict[str, Any], results: Path, verdict: Verdict | None) -> list[Any]:
    """The outputs that show one result: its provenance (and stale warning), then its table or document as
    HTML and its figure as PNG, whichever files it has."""

    base = results / key
    head = f'<p class="xmr-provenance"><strong>results/{key}</strong> · {inline_html(provenance_line(meta))}</p>'
    note = stale_note(verdict)
    if note:
        head += ('<div class="admonition warning xmr-stale"><p class="admonition-title">Stale result</p>'
                 + _markdown_to_html(note) + "</div>")
    outputs = [_html_output(head)]
    document, table = base.with_suffix(".md"), base.with_suffix(".csv")
    if table.is_file():
        outputs.append(_html_output(result_table_html(table, key, meta.get("caption") or key)))
    elif document.is_file():
        lines = document.read_text(encoding="utf-8").splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        body = _markdown_to_html("\n".join(lines)).replace("<table>", '<table class="table">')
        outputs.append(_html_output(f'<div class="xmr-result" style="overflow-x: auto">{body}</div>'))
    if base.with_suffix(".png").is_file():
        note = older_code_note(meta, verdict, project_root())
        outputs.append(_html_output(figure_html(key, meta.get("caption") or key, f"../{FIGURES}", note)))
    return outputs


def figure_html(key: str, caption: str, figures: str, note: str | None = None) -> str:
    """A result's figure (`<figures>/<key>.png`, copied there by the book build) under its caption, with the
    caption's words (Markdown code marks dropped) as its alt text; `note` (Markdown) a line of the caption after it."""
    alt = html.escape(caption.replace("`", "").replace("\n", " "), quote=True)
    after = f'<br><span class="xmr-older-code">{inline_html(note)}</span>' if note else ""
    return (f'<figure class="xmr-figure"><img src="{figures}/{key}.png" alt="{alt}">'
            f"<figcaption>{inline_html(caption)}{after}</figcaption></figure>")


def drawing_code(path: str) -> bool:
    """Whether an `xmr_core` file (a path from the project root) holds code that draws figures: `viz.py` and the
    chapter modules."""
    return path == "xmr_core/viz.py" or path.startswith("xmr_core/chapters/")


def older_code_note(meta: dict[str, Any], verdict: Verdict | None, root: Path) -> str | None:
    """For a figure whose drawing code (`drawing_code`) changed since it was drawn (its stale verdict names the
    files; a figure `xmr results restyle` redrew records their digests then, `restyled`), one Markdown sentence saying
    so and when it is redrawn; else None."""
    if verdict is None or verdict.status != "stale":
        return None
    redrawn = (meta.get("restyled") or {}).get("sources") or {}
    changed = [p for p in verdict.changed if drawing_code(p) and (
        p not in redrawn or not (root / p).is_file() or digest_bytes((root / p).read_bytes()) != redrawn[p])]
    if not changed:
        return None
    notebook = Path(meta["notebook"])  # a stale verdict names a notebook
    label = f"{notebook.parent.name}/{notebook.stem}"
    commit = ((meta.get("restyled") or {}).get("git_commit") or meta.get("git_commit") or "-")[:12]
    files = ", ".join(f"`{p}`" for p in changed)
    return (f"Drawn by older code (commit `{commit}`): {files} changed since, so this figure may not show today's "
            f"style. It is redrawn when `{notebook.as_posix()}` is next executed (`xmr book run {label}`), which needs that "
            "notebook's trained models.")


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


def fold_unseen_output(cell: Any, label: str) -> None:
    """A code cell whose output a reader needs (`runner.shown_output`) but which no committed result shows here: its
    code folded (`hide-input`) under a note that the output is in the executed book; a cell with results that also
    prints gets the note alone."""
    shown = shown_output(cell.source) if cell.cell_type == "code" else ""
    if not shown or (cell.outputs and shown != "printed"):
        return
    what = "Its printed output" if cell.outputs else "Its output"
    cell.outputs.append(_html_output(
        f'<p class="xmr-unexecuted">{what} is in the executed book, not on this page: <code>xmr book run '
        f"{label}</code>, then <code>xmr book build</code>.</p>"))
    if len(cell.outputs) == 1:
        cell.metadata.setdefault("tags", []).append("hide-input")


def split_opening(text: str) -> tuple[str, str]:
    """A notebook's first Markdown cell split after its opening: the title and the paragraphs up to the first
    one of more than one line (the paper's citation, then its summary); (text, "") when there is no such one."""
    paragraphs = text.split("\n\n")
    for i, paragraph in enumerate(paragraphs):
        if i > 0 and len(paragraph.strip().splitlines()) > 1:
            return "\n\n".join(paragraphs[:i + 1]), "\n\n".join(paragraphs[i + 1:])
    return text, ""


def split_first_cell(book: Any) -> None:
    """Split the notebook's first (Markdown) cell after its opening (`split_opening`), the rest a cell of its own."""
    import nbformat

    opening, rest = split_opening(book.cells[0].source)
    book.cells[0].source = opening
    if rest.strip():
        book.cells.insert(1, nbformat.v4.new_markdown_cell(rest))


def with_findings(book: Any, findings: str) -> Any:
    """An executed notebook with `findings` (HTML) after the opening of its first cell, as `static_notebook` places
    them on a page rendered from source."""
    first = 1 if book.cells and book.cells[0].cell_type == "markdown" else 0
    if first:
        split_first_cell(book)
    book.cells.insert(first, html_cell(findings, "what this chapter found, from its committed judgements"))
    return book


def html_cell(html_text: str, comment: str) -> Any:
    """A code cell shown as its HTML output only (`comment` is its hidden source)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(f"# {comment}")  # an empty cell is dropped
    cell.outputs = [_html_output(html_text)]
    cell.metadata["tags"] = ["remove-input"]
    return cell


def static_notebook(nb: Notebook, relative: str, results: Path, metas: dict[str, dict[str, Any]],
                    verdicts: dict[str, Verdict], findings: str | None = None) -> Any:
    """The notebook `nb` (at `relative`, e.g. `book/01_pcme/train.py`) as an unexecuted notebook with the
    results `metas` (key -> provenance, those that name this notebook) as outputs of the cells that wrote
    them; `verdicts` (key -> staleness) marks the stale ones; `findings` (HTML) follows the opening
    paragraphs of its first cell (`split_opening`)."""
    import jupytext
    import nbformat

    book = jupytext.read(nb.source, fmt="py:percent")
    book.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    first = 1 if book.cells and book.cells[0].cell_type == "markdown" else 0
    if findings is not None and first:
        split_first_cell(book)
    placed = place_results([(cell.cell_type, cell.source) for cell in book.cells], metas)
    order = _order(metas)
    for key in order:
        if placed[key] is not None:
            book.cells[placed[key]].outputs += result_outputs(key, metas[key], results, verdicts.get(key))
    for cell in book.cells:
        fold_unseen_output(cell, nb.label)
    if findings is not None:
        book.cells.insert(first, html_cell(findings, "what this chapter found, from its committed judgements"))
    banner = nbformat.v4.new_markdown_cell(
        f"```{{note}}\nThis page is `{relative}` as written, **not executed**: under each cell are the committed"
        f" results it wrote (from `{results.name}/`, each with its provenance); its other outputs (printed"
        f" values, progress) are not shown. `xmr book run {nb.label}` executes it.\n```")
    book.cells.insert(first + (findings is not None), banner)
    append_unplaced(book, [key for key in order if placed[key] is None], results, metas, verdicts)
    return book


def _order(metas: dict[str, dict[str, Any]]) -> list[str]:
    """The result keys in the order they were written."""
    return sorted(metas, key=lambda k: (str(metas[k].get("created_utc")), k))


def append_unplaced(book: Any, unplaced: list[str], results: Path, metas: dict[str, dict[str, Any]],
                    verdicts: dict[str, Verdict]) -> None:
    """The results `unplaced` (no rule of `place_results` found their cell) at the end of `book`, under a heading
    that says so."""
    import nbformat

    if not unplaced:
        return
    book.cells.append(nbformat.v4.new_markdown_cell(
        f"## {UNPLACED}\n\nWritten by this notebook through a library call whose key its source does not"
        " name, so the cell is not known:"))
    cell = nbformat.v4.new_code_cell("# results written by library calls of this notebook")  # an empty cell is dropped
    for key in unplaced:
        cell.outputs += result_outputs(key, metas[key], results, verdicts.get(key))
    cell.metadata["tags"] = ["remove-input"]
    book.cells.append(cell)


def _shows(output: Any, kinds: set[str]) -> bool:
    """Whether a display output shows a figure (`png` in `kinds`) or a table (`table`)."""
    data = output.get("data", {}) if output.get("output_type") in {"display_data", "execute_result"} else {}
    return ("png" in kinds and "image/png" in data) or ("table" in kinds and "<table" in data.get("text/html", ""))


def console_text(text: str) -> str:
    """Printed text as a terminal leaves it: each line what follows its last carriage return (a progress bar's
    last state)."""
    return "\n".join(next((s for s in reversed(line.split("\r")) if s.strip()), "") for line in text.split("\n"))


def tidy_streams(cell: Any) -> None:
    """An executed cell's printed output as one block per stream, as a terminal shows it (`console_text`), in place
    of its first chunk; its stderr (progress bars, warnings) folded under a line that counts its lines."""
    import nbformat

    texts: dict[str, list[str]] = {}
    for output in cell.outputs:
        if output.get("output_type") == "stream":
            texts.setdefault(output["name"], []).append(output["text"])
    outputs = []
    for output in cell.outputs:
        name = output.get("name") if output.get("output_type") == "stream" else None
        if name is None:
            outputs.append(output)
        elif name in texts:
            text = console_text("".join(texts.pop(name))).strip("\n")
            if name != "stderr":
                outputs.append(nbformat.v4.new_output("stream", name=name, text=text + "\n"))
            elif text:
                lines = text.count("\n") + 1
                outputs.append(_html_output(folded(f"Progress and messages on stderr ({lines} line{'s' * (lines > 1)})",
                                                   f'<pre class="xmr-stderr">{html.escape(text)}</pre>')))
    cell.outputs = outputs


def with_results(book: Any, results: Path, metas: dict[str, dict[str, Any]], verdicts: dict[str, Verdict]) -> Any:
    """An executed notebook with the committed results it wrote (`metas`: key -> provenance) shown as on a page
    rendered from source: in each cell that wrote results (`place_results`), the outputs that showed them (its
    figures, its tables) give way to `result_outputs` (provenance, a stale warning, the fitted table, the figure
    under its caption, as `results/` holds them now: restyled figures included); what it printed stays
    (`tidy_streams`)."""
    for cell in book.cells:
        if cell.cell_type == "code":
            tidy_streams(cell)
    placed = place_results([(cell.cell_type, cell.source) for cell in book.cells], metas)
    for key in metas:  # a figure and a table of one key share one provenance, the last written's: the figure's cell
        drew = [i for i, cell in enumerate(book.cells) if cell.cell_type == "code" and (results / f"{key}.png").is_file()
                and re.search(r"""write_figure\([^\n]*["']""" + re.escape(key) + """["']""", cell.source)]
        placed[key] = drew[0] if drew else placed[key]
    order = _order(metas)
    for index in sorted({i for i in placed.values() if i is not None}):
        keys = [k for k in order if placed[k] == index]
        kinds = {kind for k in keys for kind, suffixes in (("png", (".png",)), ("table", (".csv", ".md")))
                 if any((results / f"{k}{suffix}").is_file() for suffix in suffixes)}  # a figure and its table: one key
        cell = book.cells[index]
        cell.outputs = [o for o in cell.outputs if not _shows(o, kinds)]
        for key in keys:
            cell.outputs += result_outputs(key, metas[key], results, verdicts.get(key))
    append_unplaced(book, [key for key in order if placed[key] is None], results, metas, verdicts)
    return book
