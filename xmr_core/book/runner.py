"""The book runner: jupytext py:percent chapters executed with papermill.

`book/<NN_chapter>/*.py` are the sources (notebooks `train`, `ablate`, `visualise` first, in that order,
then any other in name order). `run_book` first checks the user's parameters against the `parameters`
cells of the selected notebooks, before any kernel starts: a name no selected notebook declares, or a value
whose type is not that of the declared literal, stops the run with one line naming the parameter and the
notebooks that declare it. It then converts each notebook to one with kernel `python3`, injects `PROFILE`
and the user's parameters that it declares into its `parameters` cell, executes it into
`book/_build/<profile>/<chapter>/<notebook>.ipynb` (git-ignored; never onto a tracked file), prints one
status line per notebook and a closing `N passed, N failed` line. A notebook whose inputs (its source,
its parameters, the `xmr_core` files it imports: `sources.notebook_sources`, the files `xmr results check`
judges its results by) are unchanged since its last successful run, and none of the other notebooks' results its
results were computed from has changed since (`book.staleness.notebook_reads_changed`: a chapter's claims page after
its train.py reran), is skipped unless `force=True` (or `jobs`, which changes where runs train, not what they
learn). Each execution writes its run log beside the
notebook (`xmr_core.runs.log`: the runs it trained or loaded, and their frozen inputs), and its status line
says how many runs it trained and loaded.

Every kernel computes on `kernel_threads()` torch CPU threads (1 unless `XMR_KERNEL_THREADS` says otherwise):
torch's CPU kernels split their sums by thread count, so a notebook's similarity matrices differ in the last bits
with the count and near-tied rankings with them. Measured: the DVSE chapter executed on 1 and on 2 threads (the
same runs) differed in 23 of its 94 result files, its class R-Precision in the third decimal and Figure 7's R@1 on
30 queries by one query. Training already runs on one thread (`TrainConfig.threads`); with the kernels on one as
well, the committed results reproduce on a machine with any number of cores. The count enters the skip rule.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from xmr_core.book import diff as results_diff
from xmr_core.book.results import NOTEBOOK_ENV, PARAMETERS_ENV, results_folder
from xmr_core.book.staleness import notebook_reads_changed
from xmr_core.config import check_profile, project_root
from xmr_core.io import RUN_LOG_ENV, atomic_write_text
from xmr_core.runs.executors import JOBS_ENV
from xmr_core.runs.log import describe, log_path, notebook_rank
from xmr_core.sources import fingerprint, notebook_sources

UNCHECKED = object()  # a declared parameter whose value is not a literal: any value is accepted
KERNEL_THREADS_ENV = "XMR_KERNEL_THREADS"
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # read by torch (and its BLAS) when the kernel starts
_RESULT_CALL = re.compile(r"""write_(?:table|figure|text)\(\s*[^,()]+,\s*f?["']([^"']+)["']""")
_CLAIMS_CALL = re.compile(r"""write_claims\(\s*[^,()]+,\s*["']([^"']+)["']""")


@dataclass
class Notebook:
    chapter: str  # e.g. "01_pcme"
    name: str  # e.g. "train"
    source: Path  # book/01_pcme/train.py

    @property
    def label(self) -> str:
        return f"{self.chapter}/{self.name}"

    def parameters(self) -> dict[str, Any]:
        """NAME -> the value its `parameters` cell assigns (`UNCHECKED` when not a literal); {} without one."""
        import jupytext

        cells = [c for c in jupytext.read(self.source, fmt="py:percent").cells
                 if "parameters" in c.metadata.get("tags", [])]
        declared: dict[str, Any] = {}
        for node in ast.parse(cells[0].source if cells else "", filename=str(self.source)).body:
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets = [node.target]
            else:
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    try:
                        declared[target.id] = ast.literal_eval(node.value)
                    except (ValueError, TypeError, SyntaxError):
                        declared[target.id] = UNCHECKED
        return declared

    def declared_results(self) -> list[str]:
        """Result keys this notebook writes, read from its `write_*` calls."""
        return written_keys(self.source.read_text(encoding="utf-8"))


def written_keys(text: str) -> list[str]:
    """Result keys that the `write_*` calls in `text` (a notebook or one of its cells) write."""
    keys = _RESULT_CALL.findall(text) + [f"{c}/claims.md" for c in _CLAIMS_CALL.findall(text)]
    return sorted(set(keys))


@dataclass
class Outcome:
    notebook: Notebook
    status: str  # "passed" | "failed" | "skipped"
    seconds: float
    output: Path
    error: str = ""


@dataclass
class RunSummary:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def ok(self) -> bool:
        return self.count("failed") == 0

    def line(self) -> str:
        skipped = self.count("skipped")
        tail = f", {skipped} skipped" if skipped else ""
        return f"{self.count('passed')} passed, {self.count('failed')} failed{tail}"


def book_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / "book"


def chapters(book: Path | None = None) -> dict[str, list[Notebook]]:
    """Every chapter (`NN_name` folders, in book order) with its notebooks in running order."""
    book = book or book_dir()
    out: dict[str, list[Notebook]] = {}
    for folder in sorted(p for p in book.iterdir() if p.is_dir() and re.match(r"^\d\d_\w+$", p.name)):
        sources = sorted(folder.glob("*.py"), key=lambda p: notebook_rank(p.stem))
        if sources:
            out[folder.name] = [Notebook(folder.name, p.stem, p) for p in sources]
    return out


def resolve_chapters(names: Iterable[str], book: Path | None = None) -> list[Notebook]:
    """Notebooks of the named chapters (`01_pcme` or `pcme`), or single notebooks (`01_pcme/train` or
    `pcme/train`); empty = every chapter. Chapters in the order named, notebooks in book order, each once."""
    found = chapters(book)
    names = list(names)
    if not names:
        return [nb for nbs in found.values() for nb in nbs]
    picked: list[Notebook] = []
    for name in names:
        chapter, _, notebook = name.partition("/")
        match = [c for c in found if c == chapter or c.split("_", 1)[1] == chapter]
        if not match:
            raise SystemExit(f"xmr book: no chapter {chapter!r}; chapters are: {', '.join(found) or '(none)'}")
        notebooks = [nb for nb in found[match[0]] if not notebook or nb.name == notebook]
        if not notebooks:
            raise SystemExit(f"xmr book: chapter {match[0]} has no notebook {notebook!r}; it has: "
                             f"{', '.join(nb.name for nb in found[match[0]])}")
        picked += [nb for nb in notebooks if nb not in picked]
    return picked


def parse_value(text: str) -> Any:
    """A `-p NAME VALUE` value: a Python literal when it parses as one (3, 0.5, True, [1, 2]), else a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _declare(labels: list[str]) -> str:
    return f"{', '.join(labels)} declare{'s' if len(labels) == 1 else ''}"


def _fits(value: Any, declared: Any) -> bool:
    """Whether `value` may replace the declared literal: the same type (an int where a float is declared; a
    None or non-literal declaration accepts anything)."""
    if declared is None or declared is UNCHECKED:
        return True
    if isinstance(declared, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(declared, bool)
    if isinstance(declared, float):
        return isinstance(value, (int, float))
    return type(value) is type(declared)


def check_parameters(notebooks: list[Notebook], params: dict[str, Any], book: Path) -> dict[str, dict[str, Any]]:
    """Each notebook's share of `params` (label -> the parameters it declares), after checking every one:
    declared by a selected notebook, with a value of the declared literal's type. Otherwise SystemExit with one
    line naming the parameter and the notebooks that declare it (or that none does)."""
    declared = {nb.label: nb.parameters() for nb in notebooks}
    for name, value in params.items():
        owners = [label for label, names in declared.items() if name in names]
        if not owners:
            elsewhere = [nb.label for nbs in chapters(book).values() for nb in nbs
                         if nb.label not in declared and name in nb.parameters()]
            where = f"only {_declare(elsewhere)} it" if elsewhere else "no notebook of the book declares it"
            raise SystemExit(f"xmr book: unknown parameter -p {name}: none of the selected notebooks "
                             f"({', '.join(declared) or 'none'}) declares it; {where}")
        wrong = [label for label in owners if not _fits(value, declared[label][name])]
        if wrong:
            literal = declared[wrong[0]][name]
            hint = f"; quote a string: -p {name} \"'{value}'\"" if isinstance(literal, str) else ""
            raise SystemExit(f"xmr book: parameter -p {name} {value!r} is of type {type(value).__name__}, but "
                             f"{_declare(wrong)} {name} = {literal!r} (of type {type(literal).__name__}){hint}")
    return {label: {k: v for k, v in params.items() if k in names} for label, names in declared.items()}


def library_fingerprint(nb: Notebook, root: Path) -> str:
    """Hash of the `xmr_core` files the notebook imports (`sources.notebook_sources`, the same files whose
    change `xmr results check` calls its results stale): an edit elsewhere in the library reruns no notebook."""
    return fingerprint(notebook_sources(nb.source, root), root / "xmr_core")


def kernel_threads() -> int:
    """The torch CPU threads every notebook kernel computes on: `XMR_KERNEL_THREADS`, else 1 (the module
    docstring says why); a value that is not a positive integer stops the run in one line."""
    raw = os.environ.get(KERNEL_THREADS_ENV, "1")
    if not raw.strip().isdigit() or int(raw) < 1:
        raise SystemExit(f"xmr book run: {KERNEL_THREADS_ENV} must be a positive integer, got {raw!r}")
    return int(raw)


def input_fingerprint(nb: Notebook, parameters: dict[str, Any], library: str, threads: int) -> str:
    digest = hashlib.sha256()
    digest.update(nb.source.read_bytes())
    digest.update(json.dumps(parameters, sort_keys=True, default=repr).encode())
    digest.update(library.encode())
    digest.update(f"kernel threads {threads}".encode())
    return digest.hexdigest()


def _to_notebook(source: Path) -> Any:
    import jupytext

    nb = jupytext.read(source, fmt="py:percent")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.pop("jupytext", None)
    if not any("parameters" in cell.metadata.get("tags", []) for cell in nb.cells):
        raise ValueError(f"{source}: no cell tagged 'parameters' (add '# %% tags=[\"parameters\"]')")
    return nb


def _first_error_line(exc: BaseException) -> str:
    ename, evalue = getattr(exc, "ename", type(exc).__name__), getattr(exc, "evalue", str(exc))
    line = f"{ename}: {evalue}".strip().splitlines()
    return line[0][:300] if line else ename


def execute_notebook(nb: Notebook, output: Path, parameters: dict[str, Any]) -> None:
    """Run one notebook with papermill (kernel python3, cwd = its chapter folder, `kernel_threads()` torch
    threads)."""
    import nbformat
    import papermill

    threads = str(kernel_threads())
    output.parent.mkdir(parents=True, exist_ok=True)
    source_nb = output.with_name(f".{output.stem}.input.ipynb")
    nbformat.write(_to_notebook(nb.source), source_nb)
    previous = {name: os.environ.get(name) for name in (NOTEBOOK_ENV, PARAMETERS_ENV, RUN_LOG_ENV, *THREAD_ENVS)}
    for name in THREAD_ENVS:
        os.environ[name] = threads
    os.environ[NOTEBOOK_ENV] = nb.source.relative_to(nb.source.parents[2]).as_posix()
    os.environ[PARAMETERS_ENV] = json.dumps(parameters, sort_keys=True, default=repr)
    log_path(output).write_text("")  # this execution's run log (`xmr_core.runs.log`): the runs it trains or loads
    os.environ[RUN_LOG_ENV] = str(log_path(output).resolve())
    try:
        papermill.execute_notebook(
            str(source_nb),
            str(output),
            parameters=parameters,
            kernel_name="python3",
            cwd=str(nb.source.parent),
            progress_bar=False,
        )
    finally:
        source_nb.unlink(missing_ok=True)
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_book(
    names: Iterable[str] = (),
    profile: str = "cpu",
    params: dict[str, Any] | None = None,
    force: bool = False,
    root: Path | None = None,
    echo: Callable[[str], None] = print,
    execute: Callable[[Notebook, Path, dict[str, Any]], None] = execute_notebook,
    jobs: int | None = None,
) -> RunSummary:
    """Run the named chapters (all when empty) under `profile`; returns every notebook's outcome. jobs: the
    notebooks' batches of runs train on that many workers of one thread each (`XMR_JOBS`, `xmr_core.runs.executors`;
    None: as the environment says)."""
    if jobs is None:
        return _run_book(names, profile, params, force, root, echo, execute)
    if jobs < 1:
        raise SystemExit(f"xmr book run: --jobs must be >= 1, got {jobs}")
    previous = os.environ.get(JOBS_ENV)
    os.environ[JOBS_ENV] = str(jobs)
    try:
        return _run_book(names, profile, params, force, root, echo, execute)
    finally:
        if previous is None:
            os.environ.pop(JOBS_ENV, None)
        else:
            os.environ[JOBS_ENV] = previous


def _run_book(names: Iterable[str], profile: str, params: dict[str, Any] | None, force: bool, root: Path | None,
              echo: Callable[[str], None], execute: Callable[[Notebook, Path, dict[str, Any]], None]) -> RunSummary:
    root = root or project_root()
    check_profile(profile)
    runner: dict[str, Any] = {"PROFILE": profile}  # the runner's own parameters, given to every notebook
    notebooks = resolve_chapters(names, root / "book")
    own = check_parameters(notebooks, params or {}, root / "book")
    build = root / "book" / "_build" / profile
    state_path = root / "book" / "_build" / "state.json"
    state: dict[str, str] = json.loads(state_path.read_text()) if state_path.is_file() else {}
    threads = kernel_threads()
    # the notebooks write to their profile's and data set's own folder (`results.results_folder`) unless told
    results_dir = (params or {}).get("RESULTS_DIR") or results_folder(profile, (params or {}).get("DATASET", "scenes"))
    results = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    summary = RunSummary()
    echo(f"xmr book run: {len(notebooks)} notebook(s), profile {profile}, parameters {runner | (params or {})}, "
         f"{threads} torch thread(s) a kernel")
    for nb in notebooks:
        output = build / nb.chapter / f"{nb.name}.ipynb"
        key = f"{profile}:{nb.label}"
        parameters = runner | own[nb.label]
        fingerprint = input_fingerprint(nb, parameters, library_fingerprint(nb, root), threads)
        read = notebook_reads_changed(nb.source.relative_to(root).as_posix(), results, root)
        if not force and state.get(key) == fingerprint and output.is_file() and not read:
            summary.outcomes.append(Outcome(nb, "skipped", 0.0, output))
            echo(f"[skip] {nb.label}: inputs unchanged since its last successful run ({output})")
            continue
        echo(f"[run ] {nb.label} ..." + (f" (results it read changed: {', '.join(read)})" if read else ""))
        start = time.time()
        try:
            execute(nb, output, parameters)
        except Exception as exc:  # noqa: BLE001 - any failure of a notebook is reported, not raised
            seconds = time.time() - start
            summary.outcomes.append(Outcome(nb, "failed", seconds, output, _first_error_line(exc)))
            state.pop(key, None)
            echo(f"[FAIL] {nb.label} after {seconds:.1f} s: {_first_error_line(exc)}")
            echo(f"       executed notebook with the traceback: {output}")
        else:
            seconds = time.time() - start
            summary.outcomes.append(Outcome(nb, "passed", seconds, output))
            state[key] = fingerprint
            echo(f"[ ok ] {nb.label} in {seconds:.1f} s{describe(log_path(output))} -> {output}")
        atomic_write_text(state_path, json.dumps(state, indent=1, sort_keys=True))
    passed = [o.notebook for o in summary.outcomes if o.status == "passed"]
    report_against_committed(passed, root, str(results_dir), echo)
    echo(summary.line())
    return summary


def report_against_committed(notebooks: list[Notebook], root: Path, results_dir: str,
                             echo: Callable[[str], None] = print) -> None:
    """One line per results folder (`<results_dir>/<chapter>`) the notebooks write that is committed: all its
    files as at HEAD, or which differ (`xmr_core.book.diff`); nothing where no such folder is committed."""
    folder = Path(results_dir)
    if folder.is_absolute():
        if not folder.is_relative_to(root):
            return
        folder = folder.relative_to(root)
    names = sorted({f"{folder.as_posix()}/{key.split('/')[0]}" for nb in notebooks for key in nb.declared_results()})
    names = [name for name in names if results_diff.committed_files(root, name)]
    if not names:
        return
    report = results_diff.compare_committed(root, names)
    for name in names:
        mine = {rel: found for rel, found in report.items() if rel.startswith(f"{name}/")}
        differ = [PurePosixPath(rel).name for rel, found in mine.items() if found]
        if not differ:
            echo(f"[same] {name}: all {len(mine)} files as committed (HEAD)")
        else:
            shown = ", ".join(differ[:4]) + (", ..." if len(differ) > 4 else "")
            echo(f"[DIFF] {name}: {len(differ)} of {len(mine)} files differ from HEAD ({shown}); "
                 f"`xmr results diff {PurePosixPath(name).name}` says how")


def list_book(root: Path | None = None, echo: Callable[[str], None] = print) -> None:
    """Print every chapter, its notebooks and the results each writes."""
    found = chapters((root or project_root()) / "book")
    if not found:
        echo("no chapters under book/")
    for chapter, notebooks in found.items():
        echo(chapter)
        for nb in notebooks:
            results = nb.declared_results()
            echo(f"  {nb.name:<10} {nb.source.relative_to(nb.source.parents[2])}")
            for key in results:
                echo(f"               -> results/{key}")
