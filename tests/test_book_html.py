"""`xmr book build`: the HTML book, opened in headless Chromium.

A tiny project is made in tmp: chapter `01_demo` with executed notebooks `train` and `ablate` (a title, a
Markdown table, a PNG figure output of one known colour), chapter `02_later` never executed, and a
results folder with one table, one figure (another known colour) and the chapter's claims, and the
committed results of `02_later/train` (a table and a figure of a third colour). The book is built with
the CLI, then Chromium dumps the DOM of the executed train page, the page of `02_later/train` rendered
from its source and the results, and the results page, and screenshots them: the test finds the title,
the table's cells and the figure (its exact colour, over about its area, in the screenshot's pixels),
and on the page rendered from source each result after the cell that wrote it, with its provenance.

Then the cpu book as a newcomer gets it: the project's files copied to a new folder, `xmr book build` there, and
every chapter page (notebooks and claims pages) opened at 1400 px over the DevTools protocol (`chromium_cdp`):
the findings block starts within the first 2,000 px, no table is wider than the content column (the folded
diagnostics opened too), no cell reads `nan`, every image has a caption and an alt text that is not a file hash;
after an imported module changes, the claims page shows the stale banner.
Skipped, with the reason, only when no Chromium can be found.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from chromium_cdp import OPEN_DETAILS, PAGE_METRICS, Browser
from PIL import Image

from xmr_core.book import html as book_html

ROOT = Path(__file__).resolve().parents[1]
NB_COLOUR = (13, 200, 77)  # the notebook figure's colour, a colour no theme uses
RESULT_COLOUR = (201, 17, 160)  # the results figure's colour
LATER_COLOUR = (250, 140, 7)  # the figure of the chapter rendered from source
LATER_SOURCE = '''# %% [markdown]
# # Later chapter
#
# Narration of the later chapter.

# %% tags=["parameters"]
PROFILE = "cpu"

# %%
rates = compute_rates()
write_table(rates, "later/rates", run=run, caption="Rates of the later chapter.")

# %% [markdown]
# Then a figure.

# %%
fig = draw_shape()
write_figure(fig, "later/shape", run=run, caption="A later shape.")

# %%
print("the end of the later chapter")
'''
EXEC_SOURCE = '''# %% [markdown]
# # Executed chapter
#
# A chapter the runner executes: its tables and figure as the book shows them.

# %% tags=["parameters"]
PROFILE = "cpu"

# %%
import math

import matplotlib.pyplot as plt
import pandas as pd

from xmr_core.book.results import write_figure, write_table
from xmr_core.config import RunConfig

run = RunConfig.from_params(PROFILE=PROFILE, DEVICE="cpu")
print("the executed chapter starts")

# %%
table1 = pd.DataFrame({"model": ["VSE0", "PCME", "PVSE K=2"], **{
    f"{d} R@{k} {part}": [math.nan if part == "(paper)" and m == 2 else 40.0 + m + k / 10 if part != "std" else 0.5
                          for m in range(3)]
    for d in ("i2t", "t2i") for k in (1, 5, 10) for part in ("(paper)", "(scenes)", "std")}})
write_table(table1, "exec/table1", run=run, caption="Table 1 of the executed chapter.")
table1

# %%
per_seed = pd.DataFrame({"model": ["VSE0", "PCME"] * 30, "seed": [s // 2 for s in range(60)],
                         **{f"metric {c}": [float(s) for s in range(60)] for c in range(12)}})
write_table(per_seed, "exec/per_seed", run=run, caption="Every model and seed of the executed chapter.")
per_seed

# %%
working = table1.assign(note=[math.nan, "x", None]).set_index("model")
working

# %%
fig, ax = plt.subplots(figsize=(4, 2))
ax.plot([0, 1], [0, 1])
write_figure(fig, "exec/curve", run=run, caption="The executed chapter's curve.")
plt.show()
'''
FIG_W, FIG_H = 160, 100
COMMIT = "0123456789abcdef0123456789abcdef01234567"

pytestmark = pytest.mark.browser


def _png(colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (FIG_W, FIG_H), colour).save(buf, format="PNG")
    return buf.getvalue()


def _executed(title: str, rows: list[tuple[str, str]], figure: bytes | None) -> nbformat.NotebookNode:
    table = "\n".join(["| model | R@1 |", "|---|---|", *(f"| {m} | {v} |" for m, v in rows)])
    cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\nA demo chapter notebook.\n\n{table}\n"),
        nbformat.v4.new_code_cell("PROFILE = 'cpu'", metadata={"tags": ["parameters"]}),
    ]
    if figure is not None:
        cell = nbformat.v4.new_code_cell("plot()", execution_count=2)
        cell.outputs = [
            nbformat.v4.new_output(
                "display_data",
                data={"image/png": base64.b64encode(figure).decode(), "text/plain": "<Figure 160x100>"},
            )
        ]
        cells.append(cell)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _meta(key: str, kind: str, wall: float, caption: str, notebook: str = "book/01_demo/train.py") -> str:
    return json.dumps(
        {"key": key, "kind": kind, "profile": "cpu", "dataset": "scenes", "seed": 7, "device": "cpu",
         "wall_s": wall, "git_commit": COMMIT, "notebook": notebook,
         "created_utc": "2026-01-02T03:04:05+00:00", "caption": caption}
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bookhtml")
    (root / "pyproject.toml").write_text("[project]\nname='demo'\n")
    (root / "xmr_core").mkdir()
    for chapter, names in {"01_demo": ["train", "ablate"], "02_later": ["train"]}.items():
        (root / "book" / chapter).mkdir(parents=True)
        for name in names:
            (root / "book" / chapter / f"{name}.py").write_text('# %% tags=["parameters"]\nPROFILE = "cpu"\n')
    executed = root / "book" / "_build" / "cpu" / "01_demo"
    executed.mkdir(parents=True)
    nbformat.write(_executed("Demo training", [("VSE0", "41.5"), ("PCME", "47.25")], _png(NB_COLOUR)),
                   executed / "train.ipynb")
    nbformat.write(_executed("Demo ablation", [("K=1", "12.5")], None), executed / "ablate.ipynb")
    res = root / "results" / "demo"
    res.mkdir(parents=True)
    (res / "scores.md").write_text(
        "# demo/scores\n\nScores of the demo.\n\n| method | R-P |\n|:--|--:|\n| alpha | 31.75 |\n| beta | 29.125 |\n"
    )
    (res / "scores.csv").write_text("method,R-P\nalpha,31.75\nbeta,29.125\n")
    (res / "scores.json").write_text(_meta("demo/scores", "table", 12.34, "Scores of the demo."))
    (res / "curve.png").write_bytes(_png(RESULT_COLOUR))
    (res / "curve.json").write_text(_meta("demo/curve", "figure", 56.78, "A demo curve."))
    (res / "claims.md").write_text("# Claims of the demo chapter\n\n| # | claim | verdict |\n|---|---|---|\n"
                                   "| 1 | Demo holds. | **held** |\n")
    (root / "book" / "02_later" / "train.py").write_text(LATER_SOURCE)
    later = root / "results" / "later"
    later.mkdir()
    (later / "rates.md").write_text("# later/rates\n\nRates of the later chapter.\n\n| rate | value |\n|:--|--:|\n"
                                    "| gamma | 61.875 |\n| delta | 3.0625 |\n")
    (later / "rates.json").write_text(_meta("later/rates", "table", 7.5, "Rates.", "book/02_later/train.py"))
    (later / "shape.png").write_bytes(_png(LATER_COLOUR))
    (later / "shape.json").write_text(_meta("later/shape", "figure", 8.25, "A later shape.", "book/02_later/train.py"))
    (root / "book" / "03_exec").mkdir()
    (root / "book" / "03_exec" / "train.py").write_text(EXEC_SOURCE)
    return root


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "xmr_core.book.cli", "book", *args], check=False, cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(project: Path) -> Path:
    ran = _cli(project, "run", "03_exec", "--profile", "cpu", "--yes")  # a real kernel: `book.display` shows its tables
    assert ran.returncode == 0, ran.stdout + ran.stderr
    done = _cli(project, "build", "--profile", "cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rendered from source and results: 02_later/train" in done.stdout
    return project / "book" / "_build" / "cpu" / "html"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium found (install the Debian package: apt-get install -y chromium)")


def _browse(page: Path, shot: Path, height: int) -> str:
    """Chromium's DOM of `page` after its scripts ran, and a screenshot of it (1280 wide)."""
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--force-device-scale-factor=1", "--no-first-run"]
    url = page.as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], check=False, capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "<html" in dom.stdout, dom.stderr[-2000:]
    subprocess.run([*flags, f"--screenshot={shot}", f"--window-size=1280,{height}", url],
                   check=False, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"Chromium wrote no screenshot of {page}"
    return dom.stdout


def _pixels(shot: Path, colour: tuple[int, int, int]) -> int:
    img = Image.open(shot).convert("RGB")
    return sum(count for count, rgb in img.getcolors(img.width * img.height) if rgb == colour)


def _cells(dom: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", dom, re.DOTALL)]


def test_pages_in_book_order_with_claims_and_results(built: Path) -> None:
    for page in ("01_demo/train.html", "01_demo/ablate.html", "01_demo/claims.html", "02_later/train.html",
                 "results.html"):
        assert (built / page).is_file(), page
    intro = (built / "intro.html").read_text()
    # the runner's order (train, then ablate), not the alphabetical one
    assert intro.index("01_demo/train.html") < intro.index("01_demo/ablate.html") < intro.index("02_later/train.html")
    assert intro.index("02_later/train.html") < intro.index("results.html")
    assert "<code class=\"docutils literal notranslate\"><span class=\"pre\">02_later/train</span></code>" in intro


def test_no_asset_from_another_host(built: Path) -> None:
    assert book_html.external_assets(built) == []
    for page in built.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r"""(?:src|href)=["'](?:https?:)?//""", text), page
        assert "unpkg.com" not in text and "cdn.jsdelivr" not in text, page


def test_train_page_renders_title_table_and_figure(built: Path, tmp_path: Path) -> None:
    shot = tmp_path / "train.png"
    dom = _browse(built / "01_demo" / "train.html", shot, 1600)
    assert re.search(r"<h1[^>]*>\s*Demo training", dom)
    assert "<title>Demo training" in dom
    # an executed notebook's page opens with the chapter's findings too (`static.with_findings`): after its opening
    # (the title and the first paragraph of more than one line, here the demo's table), before its outputs
    assert 'class="xmr-findings"' in dom
    assert dom.index(">VSE0<") < dom.index('class="xmr-findings"') < dom.index('.png"')
    cells = _cells(dom)
    assert ["VSE0", "41.5", "PCME", "47.25"] == [c for c in cells if c in {"VSE0", "41.5", "PCME", "47.25"}]
    src = re.findall(r'<img[^>]+src="([^"]+\.png)"', dom)
    assert src and (built / "01_demo" / src[0]).resolve().is_file()
    # the figure is on screen: its colour covers about its 160 x 100 pixels, and the page is not blank
    assert _pixels(shot, NB_COLOUR) >= 0.9 * FIG_W * FIG_H
    assert len(Image.open(shot).convert("RGB").getcolors(1 << 24)) > 50


def test_results_page_lists_provenance_table_and_figure(built: Path, tmp_path: Path) -> None:
    shot = tmp_path / "results.png"
    dom = _browse(built / "results.html", shot, 3000)
    assert re.search(r"<h1[^>]*>\s*Results", dom)
    text = re.sub(r"<[^>]+>", " ", dom)
    for expected in ("demo/scores", "demo/curve", COMMIT[:12], "12.34", "56.78", "scenes", "A demo curve."):
        assert expected in text, expected
    assert COMMIT not in text  # the short commit only
    cells = _cells(dom)
    # from the CSV, on one scale for the column: one decimal, as its largest value is at least 10
    assert {"alpha", "31.8", "beta", "29.1"} <= set(cells)
    assert (built / "_static" / "results" / "demo" / "curve.png").is_file()
    assert '<img src="_static/results/demo/curve.png" alt="A demo curve.">' in dom
    assert any(p.name == "scores.csv" for p in (built / "_downloads").rglob("*.csv"))
    assert _pixels(shot, RESULT_COLOUR) >= 0.9 * FIG_W * FIG_H


def test_page_rendered_from_source_places_results_after_their_cells(built: Path, tmp_path: Path) -> None:
    shot = tmp_path / "later.png"
    dom = _browse(built / "02_later" / "train.html", shot, 3000)
    assert re.search(r"<h1[^>]*>\s*Later chapter", dom)
    text = re.sub(r"<[^>]+>", "", dom)
    assert "not executed" in text and "Narration of the later chapter." in text
    order = ['"later/rates"', "results/later/rates", "61.875", "draw_shape()", "results/later/shape",
             "the end of the later chapter"]
    positions = [text.find(marker) for marker in order]
    assert -1 not in positions and positions == sorted(positions), dict(zip(order, positions))
    assert {"gamma", "61.875", "delta", "3.0625"} <= set(_cells(dom))
    assert COMMIT[:12] in text and "7.5 s" in text  # the provenance of the table
    assert "not a git checkout" in text  # the staleness of these results cannot be checked here: it says so
    src = re.findall(r'<img[^>]+src="([^"]+\.png)"', dom)
    assert src and (built / "02_later" / src[0]).resolve().is_file()
    assert text.find("the end of the later chapter") > text.find("results/later/shape")
    assert _pixels(shot, LATER_COLOUR) >= 0.9 * FIG_W * FIG_H


def test_executed_page_shows_fitted_tables_and_captioned_figures(built: Path, project: Path, tmp_path: Path) -> None:
    """The page of a notebook the runner executed reads as one rendered from source: merged, fitted tables with
    `—` for a missing value, diagnostics folded, each result under its provenance, the figure under its caption;
    what the notebook printed is on it. The executed notebook's own output is that fitted table already."""
    executed = nbformat.read(project / "book" / "_build" / "cpu" / "03_exec" / "train.ipynb", as_version=4)
    shown = [o["data"]["text/html"] for c in executed.cells if c.cell_type == "code" and "table1\n" in c.source + "\n"
             for o in c.outputs if "text/html" in o.get("data", {})]
    assert shown and 'class="table xmr-table"' in shown[0] and ">nan<" not in shown[0] and "dataframe" not in shown[0]
    page = built / "03_exec" / "train.html"
    with Browser(chromium(), width=1400) as browser:
        browser.open(page)
        closed = browser.evaluate(PAGE_METRICS)
        folded = browser.evaluate("[...document.querySelectorAll('article details')].map(d => d.innerText.trim())")
        text = browser.evaluate("document.querySelector('article').innerText")
        browser.evaluate(OPEN_DETAILS)
        opened = browser.evaluate(PAGE_METRICS)
        browser.screenshot(tmp_path / "exec.png", height=2400)
    assert opened["tables"] >= 4 and opened["wide"] == [] and opened["n_nan"] == 0, opened
    assert opened["page_width"] <= 1400
    assert closed["provenance"] == 3 and "the executed chapter starts" in text
    assert "— · 42.1 ± 0.5" in text.replace("\t", " ") and "Part 1 of" in text and "Table 1 of the executed" in text
    assert any(d.startswith("Diagnostic: per_seed (60 rows") for d in folded), folded
    assert any(d.startswith("Table shown by this cell (3 rows") for d in folded), folded
    assert [(i["alt"], i["caption"]) for i in opened["images"]] == [("The executed chapter's curve.",) * 2]


def test_claims_page(built: Path) -> None:
    page = (built / "01_demo" / "claims.html").read_text()
    assert "Claims of the demo chapter" in page and "Demo holds." in page


def test_no_executed_notebooks_and_no_results_is_one_clear_line(project: Path) -> None:
    done = _cli(project, "build", "--profile", "smoke")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"xmr book build: no executed notebooks in {project / 'book' / '_build' / 'smoke'} and no "
                    f"results in {project / 'book' / '_build' / 'smoke' / 'results'}; "
                    "run `xmr book run --profile smoke` first")


# The cpu book as a newcomer builds it: the project's files (what git tracks or would add) copied to a new folder,
# `xmr book build` there, every chapter page opened at 1400 px.
FINDINGS_WITHIN_PX = 2000
HASH_ALT = re.compile(r"(?:.*/)?[0-9a-f]{16,}(?:\.png)?")
CHANGED_IMPORT = "xmr_core/chapters/pcme.py"  # imported by every PCME notebook: its change stales their results
# (when the banner names it already, stale since, the first other file the claims were computed from is changed)


def _fresh_copy(dest: Path) -> Path:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _build_cpu(root: Path) -> Path:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "xmr_core.book.cli", "book", "build", "--profile", "cpu"], check=False,
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root / "book" / "_build" / "cpu" / "html"


@pytest.fixture(scope="module")
def cpu_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "results" / "pcme" / "claims.md").is_file():
        pytest.skip("no committed cpu results in this checkout")
    chromium()  # skips without Chromium before the copy and the build
    return _fresh_copy(tmp_path_factory.mktemp("freshclone"))


def _chapter_pages(html: Path) -> list[Path]:
    return sorted(p for p in html.glob("0*/*.html"))


def test_cpu_book_chapter_pages_read_findings_first_fit_and_caption(cpu_book: Path) -> None:
    html = _build_cpu(cpu_book)
    pages = _chapter_pages(html)
    assert len(pages) >= 17, [p.name for p in pages]
    problems: list[str] = [] if (html / "findings.html").is_file() else ["no Findings page (findings.html)"]
    with Browser(chromium(), width=1400) as browser:
        for page in pages:
            name = page.relative_to(html).as_posix()
            browser.open(page)
            shown = browser.evaluate(PAGE_METRICS)
            browser.evaluate(OPEN_DETAILS)
            opened = browser.evaluate(PAGE_METRICS)  # the folded diagnostics too
            top = shown["findings_top"]
            if top is None or top > FINDINGS_WITHIN_PX:
                problems.append(f"{name}: findings block at {top} px (want within {FINDINGS_WITHIN_PX})")
            for wide in opened["wide"]:
                problems.append(f"{name}: table {wide['width']:.0f} px wide in a {wide['column']:.0f} px column: "
                                f"{wide['head'][:60]!r}")
            if opened["page_width"] > 1400:
                problems.append(f"{name}: the page scrolls sideways ({opened['page_width']} px)")
            if opened["n_nan"]:
                problems.append(f"{name}: {opened['n_nan']} cells read nan, e.g. {opened['nan'][:3]}")
            for image in opened["images"]:
                if not image["caption"]:
                    problems.append(f"{name}: image {image['src']} has no caption")
                if not image["alt"].strip() or HASH_ALT.fullmatch(image["alt"].strip()):
                    problems.append(f"{name}: image {image['src']} has alt text {image['alt']!r}")
            if name.endswith("/claims.html") and not shown["provenance"]:
                problems.append(f"{name}: no provenance")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def test_cpu_book_claims_page_marks_stale_after_an_import_changes(cpu_book: Path) -> None:
    banner = "document.querySelector('.xmr-stale') ? document.querySelector('.xmr-stale').innerText : ''"
    fresh = _build_cpu(cpu_book)
    with Browser(chromium()) as browser:
        browser.open(fresh / "01_pcme" / "claims.html")
        before = browser.evaluate(banner)  # none while fresh; stale for other reasons, it does not name the file
    # an xmr_core file the claims were computed from (their provenance lists it) that the banner does not name yet
    sources = json.loads((cpu_book / "results" / "pcme" / "claims.json").read_text())["xmr_core_sources"]
    name = next(n for n in [CHANGED_IMPORT, *sorted(sources)] if n in sources and n not in before
                and (cpu_book / n).is_file() and n.endswith(".py") and not n.endswith("__init__.py"))
    changed = cpu_book / name
    changed.write_text(changed.read_text(encoding="utf-8") + "\n# a change to an imported module\n", encoding="utf-8")
    stale = _build_cpu(cpu_book)
    with Browser(chromium()) as browser:
        browser.open(stale / "01_pcme" / "claims.html")
        after = browser.evaluate(PAGE_METRICS)
        shown = browser.evaluate(banner)
    assert name not in before
    assert after["stale"] == 1 and "Stale" in shown and name in shown
    assert after["provenance"] >= 1
