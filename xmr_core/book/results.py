"""Tables, figures and claims with provenance, written atomically under `<results>/<chapter>/`.

Each profile and data set has its own results folder (`results_folder`): the cpu book on scenes `results/` (the
committed book), smoke `book/_build/smoke/results/`, any other `<profile>/<dataset>/` below one of those (the paper
profile on COCO: `results/paper/coco/`). A notebook writes and reads (`read_result`, `read_table`) only its own, and
a run that is not the cpu book on scenes refuses to write into `results/` itself.

Every artefact `<key>.{csv,md,png}` gets a `<key>.json` beside it that says what produced it: profile,
dataset, seed, device, wall time, library version, git commit, notebook, and the results of other notebooks it
was computed from (`reads`: each file the process read through `read_result` before writing it, with the digest
of the bytes it read, so a result is stale once such a file changes). All files of one artefact are
rendered in memory and staged as temp files before any is renamed into place, so a run that fails midway
never leaves a half-written table. `results/README.md` is regenerated as an index after every write.
Imported in IPython (a notebook), it makes every DataFrame the notebook shows the book's fitted table, a
written one as the result it was written as (`book.display`).

The paper's own numbers live in `xmr_core/paper_values/<chapter>.csv` (typed from the paper, with table
and row) and are read with `xmr_core.reported.paper_values(chapter)`; results are never typed by hand.
"""

from __future__ import annotations

import io
import json
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from xmr_core.book.display import csv_bytes, remember, show_fitted_tables
from xmr_core.claims import VERDICTS, Judgement, Verdict, judgements_frame
from xmr_core.config import PROFILES, RunConfig, check_profile, project_root
from xmr_core.io import remove_stale_temps, temp_beside
from xmr_core.runs.log import git_commit
from xmr_core.runs.trace import tracing
from xmr_core.sources import digest_bytes

NOTEBOOK_ENV = "XMR_NOTEBOOK"  # set by the runner to the notebook being executed
PARAMETERS_ENV = "XMR_PARAMETERS"  # set by the runner to the parameters it injected (JSON)
CPU_RESULTS_DIR = "results"  # the committed book: the cpu profile on scenes
SMOKE_RESULTS_DIR = "book/_build/smoke/results"  # smoke runs never write into results/
# the results this process has read (`read_result`), per results folder: key -> digest of the bytes read (None: the
# file was absent), named in the provenance of every result written after into the same folder
_READS: dict[Path, dict[str, str | None]] = {}


def results_folder(profile: str, dataset: str = "scenes") -> str:
    """The results folder of a profile and data set, from the project root: `results` for the cpu book on scenes,
    `book/_build/smoke/results` for smoke on scenes, else `<base>/<profile>/<dataset>` with base the smoke folder
    for smoke and `results` for the others (the paper profile on COCO: `results/paper/coco`)."""
    if (check_profile(profile), dataset) in {("cpu", "scenes"), ("smoke", "scenes")}:
        return CPU_RESULTS_DIR if profile == "cpu" else SMOKE_RESULTS_DIR
    if not dataset or "/" in dataset or dataset.startswith("."):
        raise ValueError(f"data set name {dataset!r} cannot name a results folder")
    return f"{SMOKE_RESULTS_DIR if profile in ('smoke', 'paper-smoke') else CPU_RESULTS_DIR}/{profile}/{dataset}"


def results_root(run: RunConfig) -> Path:
    """The run's results folder: `run.results_dir` when given (relative paths taken from the project root, so a
    notebook's cwd does not matter), else its profile's and data set's own (`results_folder`). ValueError when a
    run other than the cpu book on scenes would write into the cpu book's `results/`."""
    root = Path(run.results_dir or results_folder(run.profile, run.dataset))
    root = root if root.is_absolute() else project_root() / root
    if (run.profile, run.dataset) != ("cpu", "scenes") and root.resolve() == (project_root() / CPU_RESULTS_DIR).resolve():
        raise ValueError(f"RESULTS_DIR {run.results_dir!r} is the cpu book's results folder; profile {run.profile} on "
                         f"{run.dataset} writes to {results_folder(run.profile, run.dataset)}/ (leave RESULTS_DIR empty)")
    return root


def records_home(results: Path) -> Path:
    """The folder whose `runs/records/<profile>/` holds the run records of the results folder `results`
    (`runs.record.records_root`): the project for the committed book's results (`results/` and the folders in it),
    else the results folder's parent (smoke: `book/_build/smoke`; a test's temporary folder), so that smoke never
    writes records into the repository's `runs/records/`."""
    results, committed = results.resolve(), (project_root() / CPU_RESULTS_DIR).resolve()
    return project_root() if results == committed or committed in results.parents else results.parent


def own_result_files(root: Path) -> list[Path]:
    """Every provenance `.json` of the results folder `root` (`<chapter>/**/<name>.json`), sorted, without those of
    the other profiles' folders nested in it (`<root>/<profile>/...`, `results_folder`)."""
    return sorted(p for p in root.glob("*/**/*.json") if p.relative_to(root).parts[0] not in PROFILES)


def _current_cell() -> str | None:
    """The digest of the code cell being executed (IPython's input history), None outside IPython: the
    static book places the result after the cell with this digest."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if not history:
        return None
    return digest_bytes(history[-1].strip().encode("utf-8"))


def _notebook_inputs(notebook: str | None) -> dict[str, Any]:
    """The notebook's parameters (as the runner injected them) and what it imports (`sources.notebook_inputs`)."""
    if not notebook or not (project_root() / notebook).is_file():
        return {}
    from xmr_core.sources import notebook_inputs

    injected = os.environ.get(PARAMETERS_ENV)
    return {"parameters": json.loads(injected) if injected else None,
            **notebook_inputs(project_root() / notebook, project_root()), "cell": _current_cell()}


def read_result(key: str, *, run: RunConfig) -> bytes | None:
    """The bytes of the result file `<results>/<key>` (e.g. "hmrn/per_seed.csv": what another notebook wrote),
    None when it is absent; either way recorded as read, so every result this process writes after into the same
    folder names it and the digest of what was read (`reads` in its provenance): `xmr results check` calls that
    result stale once the file changes (or appears), and `xmr book run` reruns its notebook."""
    _check_key(key)
    root = results_root(run)
    path = root / key
    data = path.read_bytes() if path.is_file() else None
    _READS.setdefault(root.resolve(), {})[key] = None if data is None else digest_bytes(data)
    return data


def read_table(key: str, *, run: RunConfig) -> pd.DataFrame:
    """The table `<results>/<key>.csv` another notebook wrote, read through `read_result` (so recorded as read);
    absent: FileNotFoundError naming the file, the profile and data set."""
    data = read_result(f"{key}.csv", run=run)
    if data is None:
        raise FileNotFoundError(f"{results_root(run) / key}.csv: not found for profile {run.profile} on {run.dataset}; "
                                f"run the notebook that writes {key} under that profile and data set first (`xmr "
                                "book list` names it)")
    return pd.read_csv(io.BytesIO(data))


def provenance(run: RunConfig, key: str, kind: str, **extra: Any) -> dict[str, Any]:
    """What produced an artefact: the run's settings, the commit, the versions and torch thread count it was
    computed with (the thread count moves the last bits of scores), and what the notebook computed it from (its
    injected parameters, its code cells' digest, the digest of each `xmr_core` file it imports, the digest of
    the cell that wrote it, and the results read before it, `read_result`)."""
    import numpy
    import torch

    from xmr_core import __version__

    notebook = os.environ.get(NOTEBOOK_ENV)
    return {
        "key": key,
        "kind": kind,
        "profile": run.profile,
        "dataset": run.dataset,
        "data_root": run.data_root,
        "seed": run.seed,
        "device": str(run.torch_device),
        "wall_s": round(run.elapsed_s(), 2),
        "xmr_version": __version__,
        "git_commit": git_commit(),
        "notebook": notebook,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "torch_threads": torch.get_num_threads(),
        **({"encoders": run.encoders} if run.encoders else {}),
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({"run_extra": dict(run.extra)} if run.extra else {}),  # e.g. the trunk's weights (`chapter_setup`)
        **extra,
        **_notebook_inputs(notebook),
        **({"reads": dict(sorted(reads.items()))} if (reads := _READS.get(results_root(run).resolve())) else {}),
    }


def _commit_files(files: dict[Path, bytes]) -> None:
    """Stage every file as a temp file beside its target, then rename them all into place.

    If a rename fails part-way, the files already replaced are restored from backups, so either every
    file of the artefact is new or every file is as it was.
    """
    staged: list[tuple[Path, Path]] = []
    backups: dict[Path, str] = {}
    replaced: list[Path] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = temp_beside(path)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            if path.exists():
                backup = f"{tmp}.bak"
                os.link(path, backup)
                backups[path] = backup
        try:
            for tmp, path in staged:
                os.replace(tmp, path)
                replaced.append(path)
        except BaseException:
            for path in replaced:
                if path in backups:
                    os.replace(backups.pop(path), path)
                else:
                    path.unlink(missing_ok=True)
            raise
    finally:
        for tmp in [t for t, _ in staged] + list(backups.values()):
            if os.path.exists(tmp):
                os.unlink(tmp)
    remove_stale_temps(files)


def _json_bytes(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")


def _check_key(key: str) -> str:
    parts = key.split("/")
    if len(parts) < 2 or any(not p or p.startswith(".") for p in parts):
        raise ValueError(f"result key {key!r} must look like '<chapter>/<name>'")
    return key


def _shown_digits(value: float, digits: int) -> float:
    """`value` rounded for a general-format Markdown cell: to `digits` decimals, or to 2 significant digits where
    those decimals would show it as 0 (a learning rate of 5e-4, a std of 0.073 at one decimal)."""
    if value == 0 or not math.isfinite(value) or abs(value) >= 10.0 ** -digits:
        return round(value, digits)
    return float(f"{value:.2g}")


def write_table(
    df: pd.DataFrame, key: str, *, run: RunConfig, caption: str = "", float_digits: int = 1,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write `<results>/<key>.csv`, `.md` (with `caption` above the table) and `.json` provenance (plus
    `extra`, e.g. the Bayes ceiling's own values)."""
    _check_key(key)
    if df.empty and not tracing():  # the run plan's trace writes into a folder it throws away: untrained runs
        # may leave a table empty there (a loss curve)
        raise ValueError(f"table {key!r} is empty: refusing to write an empty result")
    base = results_root(run) / key
    csv = csv_bytes(df)
    shown = df.copy()
    formats = []  # per column: fixed at `float_digits`, or general where that would show 1e-05 as 0.0
    for col in shown.columns:  # whole-number columns (counts) print as integers; object dtype keeps them so
        values = shown[col]
        if pd.api.types.is_float_dtype(values) and values.notna().all() and (values % 1 == 0).all():
            values = values.astype("int64")
        small = pd.api.types.is_float_dtype(values) and ((values != 0) & (values.abs() < 10.0 ** -float_digits)).any()
        formats.append("g" if small else f".{float_digits}f")
        if small:  # general format prints what it is given: round it as the other columns, 2 digits where tiny
            values = values.map(lambda v: _shown_digits(v, float_digits))
        if pd.api.types.is_numeric_dtype(values):
            shown[col] = values.astype(object)
        else:  # a '|' in a cell would end it: escaped, as Markdown tables read it
            shown[col] = values.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)
    shown.columns = [str(c).replace("|", "\\|") for c in shown.columns]
    table = shown.to_markdown(index=False, floatfmt=formats)
    header = f"# {key}\n\n" + (f"{caption}\n\n" if caption else "")
    stamp = f"\n\n_profile `{run.profile}`, dataset `{run.dataset}`, seed {run.seed}; provenance in `{base.name}.json`._\n"
    meta = provenance(run, key, "table", caption=caption, columns=list(map(str, df.columns)), n_rows=len(df),
                      **(extra or {}))
    _commit_files(
        {
            base.with_suffix(".csv"): csv,
            base.with_suffix(".md"): (header + table + stamp).encode("utf-8"),
            base.with_suffix(".json"): _json_bytes(meta),
        }
    )
    write_index(results_root(run))
    remember(csv, key, caption or key)  # the notebook shows this frame as the result it wrote (`book.display`)
    return base.with_suffix(".csv")


def _png(fig: Any, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def write_figure(fig: Any, key: str, *, run: RunConfig, caption: str = "", dpi: int = 120) -> Path:
    """Write a matplotlib figure as `<results>/<key>.png` plus `.json` provenance."""
    _check_key(key)
    base = results_root(run) / key
    meta = provenance(run, key, "figure", caption=caption)
    _commit_files({base.with_suffix(".png"): _png(fig, dpi), base.with_suffix(".json"): _json_bytes(meta)})
    write_index(results_root(run))
    return base.with_suffix(".png")


def rewrite_figure(fig: Any, key: str, results: Path, meta: dict[str, Any], dpi: int = 120) -> Path:
    """Write `<results>/<key>.png` drawn anew and its `.json` as `meta` gives it: a figure redrawn from the committed
    tables it shows (`xmr results restyle`) keeps the provenance of the notebook that computed them."""
    _check_key(key)
    base = results / key
    _commit_files({base.with_suffix(".png"): _png(fig, dpi), base.with_suffix(".json"): _json_bytes(meta)})
    write_index(results)
    return base.with_suffix(".png")


def write_data(value: Any, key: str, *, run: RunConfig, caption: str = "") -> Path:
    """Write a JSON result `<results>/<key>.json`: its provenance with the value under "data" (kind "data": e.g. the
    claims of a notebook bound to their run records, `book.recompute.write_bindings`), so that `xmr results check`
    and `xmr results diff` cover it as they cover a table."""
    _check_key(key)
    path = results_root(run) / f"{key}.json"
    _commit_files({path: _json_bytes({**provenance(run, key, "data", caption=caption), "data": value})})
    write_index(results_root(run))
    return path


def write_text(text: str, key: str, *, run: RunConfig, caption: str = "") -> Path:
    """Write a markdown document (`key` ends in `.md`) plus `.json` provenance beside it."""
    _check_key(key)
    if not key.endswith(".md"):
        raise ValueError(f"text result {key!r} must end in .md")
    path = results_root(run) / key
    meta = provenance(run, key, "text", caption=caption)
    _commit_files({path: text.encode("utf-8"), path.with_suffix(".json"): _json_bytes(meta)})
    write_index(results_root(run))
    return path


@dataclass
class Claim:
    """One claim of a paper and what this run's evidence says of it."""

    claim: str  # what the paper says, in one sentence
    source: str  # where the paper says it (section / table / figure)
    evidence: str  # the numbers from this run, rendered from computed values
    verdict: Verdict  # "not tested": say why in evidence; "inconclusive": the interval is too wide to say

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"Claim {self.claim!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}")


def notebook_claims(run: RunConfig, chapter: str) -> list[Claim]:
    """The claims a chapter's train.py and ablate.py wrote (`<results>/<chapter>/claims_train.csv`,
    `claims_ablate.csv`, read through `read_result`), for its claims page; a notebook not run yet gives one "not
    tested" line saying so."""
    claims = []
    for part in ("claims_train", "claims_ablate"):
        data = read_result(f"{chapter}/{part}.csv", run=run)
        if data is not None:
            claims += [Claim(r["claim"], r["source"], r["evidence"], r["verdict"])
                       for _, r in pd.read_csv(io.BytesIO(data)).iterrows()]
        else:
            claims.append(Claim(f"(claims of {part.split('_')[1]}.py)", "-", f"{part}.csv not found: run it first",
                                "not tested"))
    return claims


def claims_frame(claims: Sequence[Claim]) -> pd.DataFrame:
    """The claims as a table, one row per claim (claim, source, evidence, verdict), for a notebook to show."""
    return pd.DataFrame([asdict(c) for c in claims])


def write_judgements(judgements: Sequence[Judgement], chapter: str, part: str, run: RunConfig) -> Path:
    """Write `<results>/<chapter>/judgements_<part>.{csv,md,json}` (`claims.judgements_frame`), which
    `python -m xmr_core.bench claims` reads."""
    return write_table(judgements_frame(judgements), f"{chapter}/judgements_{part}", run=run, float_digits=2,
                       caption=f"The claims of `{chapter}` ({part}) judged by `xmr_core.claims.judge`.")


def write_claims(claims: list[Claim], chapter: str, *, run: RunConfig, preamble: str = "") -> Path:
    """Render `<results>/<chapter>/claims.md` from checked claims."""
    lines = [f"# Claims of the paper tested by the `{chapter}` chapter", ""]
    if preamble:
        lines += [preamble, ""]
    lines += ["| # | claim | source | evidence (this run) | verdict |", "|---|---|---|---|---|"]
    for i, c in enumerate(claims, 1):
        cells = [str(i), c.claim, c.source, c.evidence, f"**{c.verdict}**"]
        lines.append("| " + " | ".join(x.replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    counts = ", ".join(f"{sum(c.verdict == v for c in claims)} {v}" for v in VERDICTS)
    lines += ["", f"Of {len(claims)} claims on this run (profile `{run.profile}`, dataset `{run.dataset}`): {counts}."]
    return write_text("\n".join(lines) + "\n", f"{chapter}/claims.md", run=run)


def write_index(root: Path) -> Path:
    """Regenerate `<root>/README.md`: every table, figure and document of this results folder (not of the other
    profiles' folders nested in it, `own_result_files`) with its provenance."""
    rows: list[str] = []
    for meta_path in own_result_files(root):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(meta, dict) or "kind" not in meta:
            continue
        target = meta_path.with_suffix({"table": ".md", "figure": ".png", "text": ".md", "data": ".json"}[meta["kind"]])
        rel = target.relative_to(root).as_posix()
        commit = (meta.get("git_commit") or "-")[:12]
        rows.append(
            f"| [{rel}]({rel}) | {meta['kind']} | {meta.get('profile')} | {meta.get('dataset')} | "
            f"{meta.get('seed')} | {meta.get('wall_s')} | {commit} | {meta.get('created_utc')} |"
        )
    text = "\n".join(
        [
            "# Results index",
            "",
            "Regenerated by `xmr_core.book.results` whenever a notebook writes a result; never edit by hand.",
            "Numbers on the `scenes` data set are from the embedded synthetic benchmark, not COCO, Flickr30K,",
            "CUB or Visual Genome: compare trends and orderings with the papers, not absolute values.",
            "",
            "| result | kind | profile | dataset | seed | wall s | commit | written (UTC) |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    index = root / "README.md"
    _commit_files({index: text.encode("utf-8")})
    return index


show_fitted_tables()  # a notebook that writes results shows every table as the book does (`book.display`)
