"""`xmr book build`: an offline HTML book (Jupyter Book 1.x, Sphinx) from the executed notebooks, or from
the notebooks' sources and the committed results.

Nothing is executed. The pages are, in book order (the runner's chapter and notebook order), every notebook
of the book: its executed copy under `book/_build/<profile>/<chapter>/` when there is one (the results it wrote in
place of the outputs that showed them, `static.with_results`), else its py:percent source with the results it
wrote placed after the cells that wrote them (`book.static`); then
each chapter's `claims.md`, and a results page that lists every table and figure of the profile's results
folder (`results/`, or `book/_build/smoke/results` for `smoke`) with its provenance, read from the `.json`
beside it. Results that `xmr results check` finds stale are marked as such on every page.

The sources are staged in `book/_build/<profile>/_html_src/` and the HTML written to
`book/_build/<profile>/html/` (open `index.html`). The theme's network features (launch buttons,
repository links, Thebe, comments, MathJax) are turned off, so a built page loads no asset from
another host; `external_assets` lists any that would.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from xmr_core.book.findings import (
    badge,
    chapter_judgements,
    findings_html,
    findings_page,
    tally_html,
    verdict_order,
)
from xmr_core.book.leaderboard import leaderboard_html
from xmr_core.book.results import own_result_files, results_folder
from xmr_core.book.runner import Notebook, chapters
from xmr_core.book.staleness import Verdict, check_results, result_metas
from xmr_core.book.static import (
    FIGURES,
    figure_html,
    inline_html,
    older_code_note,
    provenance_line,
    stale_note,
    static_notebook,
    with_findings,
    with_results,
)
from xmr_core.book.tables import result_table_html
from xmr_core.config import check_profile, project_root

SOURCE_DIR = "_html_src"
STATIC = "_static"  # the staged book's static files (style, script, result figures), copied into the HTML
ASSETS = Path(__file__).parent / "assets"  # xmr.css, findings.js
LEADERBOARD = "leaderboard"  # the results folder whose notebook page opens with the ranking (`book.leaderboard`)
RANKING = "leaderboard_ranking.png"
HTML_DIR = "html"
TITLE = "xmr: a replication book for image-text retrieval"

# the theme options that would make a page reach another host (links out, or scripts loaded at view time)
_CONFIG = {
    "title": TITLE,
    "author": "the xmr authors",
    "copyright": "",
    "only_build_toc_files": True,
    "execute": {"execute_notebooks": "off"},
    "parse": {"myst_enable_extensions": ["colon_fence", "deflist", "substitution", "tasklist"]},
    "html": {
        "use_repository_button": False,
        "use_issues_button": False,
        "use_edit_page_button": False,
        "use_multitoc_numbering": False,
        "comments": {"hypothesis": False, "utterances": False},
        "extra_footer": "",
        "home_page_in_navbar": True,
    },
    "launch_buttons": {
        "notebook_interface": "classic",
        "binderhub_url": "",
        "jupyterhub_url": "",
        "colab_url": "",
        "deepnote_url": "",
        "thebe": False,
    },
    "repository": {"url": "", "path_to_book": "", "branch": ""},
    "sphinx": {
        "config": {
            # jupyter-book's default extensions less sphinx_thebe (its pages name a script on a CDN),
            # sphinx_comments (hypothes.is, utterances) and intersphinx (fetches inventories)
            "extensions": [
                "sphinx_togglebutton",
                "sphinx_copybutton",
                "myst_nb",
                "jupyter_book",
                "sphinx_external_toc",
                "sphinx_design",
                "sphinx_book_theme",
            ],
            "html_static_path": [STATIC],
            "html_css_files": ["xmr.css"],
            "html_show_copyright": False,
            "html_show_sphinx": False,
            "html_theme_options": {
                "use_download_button": True,
                "use_fullscreen_button": False,
                "launch_buttons": {},
                "icon_links": [],
                "show_toc_level": 2,
            },
            "nb_render_markdown_format": "commonmark",
            "suppress_warnings": ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"],
        },
    },
}


@dataclass
class BuildSummary:
    html: Path  # book/_build/<profile>/html
    pages: list[str]  # document names in book order, e.g. "01_pcme/train"
    from_source: list[str]  # notebooks with no executed copy, rendered from source and results (e.g. "01_pcme/ablate")
    results: int  # tables and figures listed on the results page
    stale: int  # results of the results folder that are stale or could not be checked
    seconds: float


def results_dir(profile: str, root: Path, dataset: str = "scenes") -> Path:
    """The results folder a build of `profile` on `dataset` shows: theirs alone (`results.results_folder`)."""
    return root / results_folder(profile, dataset)


def _chapter_results(chapter: str) -> str:
    """`01_pcme` -> `pcme`: the results folder a chapter writes to."""
    return chapter.split("_", 1)[1] if "_" in chapter else chapter


def _load_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) and meta.get("kind") in {"table", "figure"} else None


def result_items(results: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every table (`.md`) and figure (`.png`) under `results` that has its provenance `.json`, sorted."""
    items = []
    for meta_path in own_result_files(results):
        meta = _load_meta(meta_path)
        if meta is None:
            continue
        target = meta_path.with_suffix(".png" if meta["kind"] == "figure" else ".md")
        if target.is_file():
            items.append((target, meta))
    return items


def _escape_html(line: str) -> str:
    """`<` and `>` outside code spans as Markdown escapes, so `images/<img>` is text, not an HTML tag."""
    parts = line.split("`")
    return "`".join(p if i % 2 else p.replace("<", "\\<").replace(">", "\\>") for i, p in enumerate(parts))


def _table_body(md: str) -> str:
    """A result's `.md` without its `# key` title line; its other headings are made plain bold lines."""
    lines = md.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(
        f"**{_escape_html(m.group(1))}**" if (m := re.match(r"^#+\s+(.*)", line)) else _escape_html(line)
        for line in lines
    )


def results_page(results: Path, staged: Path, profile: str, verdicts: dict[str, Verdict],
                 dataset: str = "scenes") -> tuple[str, int]:
    """The results page (MyST markdown): every table and figure with its provenance and, where `verdicts`
    (key -> staleness) says so, a stale warning, by chapter."""
    items = result_items(results)
    where = results.relative_to(project_root()) if results.is_relative_to(project_root()) else results
    out = [
        "# Results",
        "",
        (
            f"Every table and figure in the results folder of profile `{profile}` on data set `{dataset}`"
            f" (`{where.as_posix()}/`,"
            " no other profile's or data set's), with the provenance written"
            " beside it (the `.json` of the same name). Numbers on the `scenes` data set come from the embedded"
            " synthetic benchmark: compare trends and orderings with the papers, not absolute values."
        ),
        "",
        "| result | kind | profile | dataset | seed | wall s | commit | written (UTC) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target, meta in items:
        key = target.relative_to(results).with_suffix("").as_posix()
        anchor = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
        out.append(
            f"| [{key}](#{anchor}) | {meta['kind']} | {meta.get('profile')} | {meta.get('dataset')} | "
            f"{meta.get('seed')} | {meta.get('wall_s')} | {(meta.get('git_commit') or '-')[:12]} | "
            f"{meta.get('created_utc')} |"
        )
    if not items:
        out += ["", f"*No table or figure under `{results}` yet.*"]
    current = None
    for target, meta in items:
        rel = target.relative_to(results)
        key = rel.with_suffix("").as_posix()
        folder = rel.parts[0]
        if folder != current:
            out += ["", f"## {folder}", ""]
            current = folder
        copy = staged / "results" / rel
        anchor = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
        out += [f"({anchor})=", f"### {key}", "", provenance_line(meta), ""]
        if note := stale_note(verdicts.get(key)):
            out += [":::{warning}", note, ":::", ""]
        if meta["kind"] == "figure":
            note = older_code_note(meta, verdicts.get(key), project_root())
            out += [figure_html(key, meta.get("caption") or key, FIGURES, note), ""]
        else:
            csv = target.with_suffix(".csv")
            body = (result_table_html(csv, key, meta.get("caption") or key) if csv.is_file()
                    else _table_body(target.read_text(encoding="utf-8")))
            out += [body, ""]
            if csv.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(csv, copy.with_suffix(".csv"))
                out += [f"{{download}}`{rel.with_suffix('.csv').as_posix()} <results/{rel.with_suffix('.csv').as_posix()}>`", ""]
    return "\n".join(out) + "\n", len(items)


def stage_assets(staged: Path, results: Path, metas: dict[str, dict[str, Any]]) -> None:
    """The book's style and script, and every result figure as `<FIGURES>/<key>.png`, into the staged sources."""
    static = staged / STATIC
    static.mkdir(parents=True, exist_ok=True)
    for asset in ASSETS.iterdir():
        if asset.is_file():
            shutil.copy2(asset, static / asset.name)
    for key, meta in metas.items():
        figure = results / f"{key}.png"
        if meta.get("kind") == "figure" and figure.is_file():
            (staged / FIGURES / key).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(figure, staged / FIGURES / f"{key}.png")


def claims_page(text: str, meta: dict[str, Any] | None, verdict: Verdict | None, frame: pd.DataFrame) -> str:
    """A chapter's `claims.md` as its page: after the title, its provenance, a stale warning where `xmr results
    check` finds it stale, and the verdict tally of the chapter's judgements (`frame`); verdicts colour-coded."""
    lines = text.splitlines()
    title, rest = (lines[0], lines[1:]) if lines and lines[0].startswith("# ") else ("# Claims", lines)
    head = [title, ""]
    if meta is not None:
        words = inline_html(provenance_line(meta))
        head += [f'<p class="xmr-provenance"><strong>results/{meta.get("key", "")}</strong> · {words}</p>', ""]
    if note := stale_note(verdict):
        head += [":::{admonition} Stale result", ":class: warning xmr-stale", note, ":::", ""]
    if not frame.empty:
        head += [f'<p class="xmr-findings">{tally_html(frame)}</p>', ""]
    body = "\n".join(rest)
    for v in verdict_order(frame["verdict"]) if not frame.empty else []:
        body = body.replace(f"| **{v}** |", f"| {badge(v)} |").replace(f"| **{v}**:", f"| {badge(v)}:")
    return "\n".join(head) + body + "\n"


def _write_yaml(path: Path, data: Any) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _verdicts(results: Path, root: Path) -> dict[str, Verdict]:
    """key -> staleness of every result under `results` (`xmr results check`)."""
    if not results.is_dir():
        return {}
    try:
        return {r.key: r.verdict for r in check_results(results, root).results}
    except ValueError as exc:
        raise SystemExit(f"xmr book build: {exc}") from None


def stage(profile: str, root: Path, staged: Path, dataset: str = "scenes") -> tuple[list[str], list[str], int, int]:
    """Write the book's sources into `staged`: config, table of contents, pages. Returns (pages, notebooks
    rendered from source, number of results, number of stale or unchecked results)."""
    import nbformat

    executed = root / "book" / "_build" / profile
    found: dict[str, list[Notebook]] = chapters(root / "book")
    results = results_dir(profile, root, dataset)
    verdicts = _verdicts(results, root)
    from_source = [nb.label for nbs in found.values() for nb in nbs
                   if not (executed / nb.chapter / f"{nb.name}.ipynb").is_file()]
    if len(from_source) == sum(map(len, found.values())) and not verdicts:
        raise SystemExit(
            f"xmr book build: no executed notebooks in {executed} and no results in {results}; "
            f"run `xmr book run --profile {profile}` first"
        )
    if staged.exists():
        shutil.rmtree(staged)
    staged.mkdir(parents=True)
    metas = dict(result_metas(results)) if verdicts else {}
    stage_assets(staged, results, metas)
    pages: list[str] = []
    parts = []
    judged: list[tuple[str, pd.DataFrame, str | None]] = []
    for chapter, notebooks in found.items():
        entries = []
        (staged / chapter).mkdir()
        folder = _chapter_results(chapter)
        claims = results / folder / "claims.md"
        frame = chapter_judgements(results / folder)
        judged.append((chapter, frame, f"{chapter}/claims.html" if claims.is_file() else None))
        for nb in notebooks:
            target = staged / chapter / f"{nb.name}.ipynb"
            findings = findings_html(frame, nb.name if len(notebooks) > 1 else None,
                                     "claims.html" if claims.is_file() else None)
            if folder == LEADERBOARD and (board := leaderboard_html(
                    results, staged / FIGURES / RANKING, f"../{FIGURES}/{RANKING}")):
                findings += "\n" + board
            relative = nb.source.relative_to(root).as_posix()
            mine = {k: m for k, m in metas.items() if m.get("notebook") == relative}
            if nb.label in from_source:
                nbformat.write(static_notebook(nb, relative, results, mine, verdicts, findings), target)
            else:  # executed: its own outputs, its results and the findings as on a page rendered from source
                book = nbformat.read(executed / chapter / f"{nb.name}.ipynb", as_version=4)
                nbformat.write(with_findings(with_results(book, results, mine, verdicts), findings), target)
            entries.append({"file": f"{chapter}/{nb.name}"})
        if claims.is_file():
            key = f"{folder}/claims"
            (staged / chapter / "claims.md").write_text(
                claims_page(claims.read_text(encoding="utf-8"), metas.get(key), verdicts.get(key), frame),
                encoding="utf-8")
            entries.append({"file": f"{chapter}/claims"})
        parts.append({"caption": chapter, "chapters": entries})
        pages += [e["file"] for e in entries]
    (staged / "findings.md").write_text(findings_page(judged, f"{STATIC}/findings.js"), encoding="utf-8")
    parts.insert(0, {"caption": "Findings", "chapters": [{"file": "findings"}]})
    pages.insert(0, "findings")
    text, n_results = results_page(results, staged, profile, verdicts, dataset)
    (staged / "results.md").write_text(text, encoding="utf-8")
    parts.append({"caption": "Results", "chapters": [{"file": "results"}]})
    pages.append("results")
    n_stale = sum(v.status != "fresh" for v in verdicts.values())
    intro = [
        f"# {TITLE}",
        "",
        (
            f"The notebooks of profile `{profile}`, each chapter's claims, and every table and figure with its"
            f" provenance. Built by `xmr book build` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
            f" nothing was executed: a notebook run under `book/_build/{profile}/` is shown as executed, any"
            " other from its source with the results it wrote placed after the cells that wrote them."
        ),
        "",
        "| chapter | pages |",
        "|---|---|",
    ]
    for part in parts:
        links = ", ".join(f"[{Path(e['file']).name}]({e['file']})" for e in part["chapters"])
        intro.append(f"| {part['caption']} | {links} |")
    if from_source:
        intro += ["", f"Rendered from source and the committed results (not executed under `{profile}`; "
                  f"`xmr book run --profile {profile}` executes them): " + ", ".join(f"`{m}`" for m in from_source) + "."]
    if n_stale:
        intro += ["", (f"{n_stale} of {len(verdicts)} results are stale or could not be checked"
                       " (`xmr results check` lists them); their pages say so.")]
    (staged / "intro.md").write_text("\n".join(intro) + "\n", encoding="utf-8")
    _write_yaml(staged / "_toc.yml", {"format": "jb-book", "root": "intro", "parts": parts})
    _write_yaml(staged / "_config.yml", _CONFIG)
    return pages, from_source, n_results, n_stale


_EXTERNAL = re.compile(
    r"""<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=["'](?:https?:)?//[^"']+""", re.IGNORECASE
)


def external_assets(html: Path) -> list[str]:
    """Tags of the built pages that would load something from another host (should be none)."""
    hits = []
    for page in sorted(html.rglob("*.html")):
        for match in _EXTERNAL.finditer(page.read_text(encoding="utf-8", errors="replace")):
            hits.append(f"{page.relative_to(html)}: {match.group(0)[:160]}")
    return hits


def build_html(
    profile: str = "cpu", root: Path | None = None, echo: Callable[[str], None] = print, quiet: bool = True,
    dataset: str = "scenes",
) -> BuildSummary:
    """Stage the executed notebooks, claims and results of `profile` (its results on `dataset`:
    `results.results_folder`), and build the HTML book."""
    from jupyter_book.sphinx import build_sphinx

    root = root or project_root()
    check_profile(profile)
    start = time.time()
    base = root / "book" / "_build" / profile
    staged, html = base / SOURCE_DIR, base / HTML_DIR
    pages, from_source, n_results, n_stale = stage(profile, root, staged, dataset)
    if from_source:
        echo(f"xmr book build: not executed, rendered from source and results: {', '.join(from_source)}")
    if n_stale:
        echo(f"xmr book build: {n_stale} result(s) stale or not checked (`xmr results check` lists them)")
    if html.exists():
        shutil.rmtree(html)
    echo(f"xmr book build: {len(pages)} page(s), {n_results} result(s), profile {profile} -> {html}")
    status = build_sphinx(
        staged,
        html,
        noconfig=True,
        path_config=str(staged / "_config.yml"),
        confoverrides={"external_toc_path": (staged / "_toc.yml").as_posix(), "latex_individualpages": False},
        doctreedir=str(base / ".doctrees"),
        freshenv=True,
        force_all=True,
        quiet=quiet,
        really_quiet=quiet,
    )
    if status:
        raise SystemExit(f"xmr book build: Sphinx failed ({status}); see the messages above")
    leaks = external_assets(html)
    if leaks:
        echo("xmr book build: warning, pages load assets from other hosts:\n  " + "\n  ".join(leaks[:10]))
    summary = BuildSummary(html, pages, from_source, n_results, n_stale, time.time() - start)
    echo(f"xmr book build: done in {summary.seconds:.1f} s; open {html / 'index.html'}")
    return summary
