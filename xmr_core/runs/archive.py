"""The run archive: the trained runs a profile's notebooks load, with the frozen inputs their keys depend on,
in one `.tar.gz` with a manifest; `unpack` restores it into a run cache only whole and verified.

What `pack(profile)` takes from the cache (`XMR_CACHE`), paths relative to it:
- `runs/<method>-<key16>/{best.pt,result.json,metrics.csv}` of every run a run log of the profile's executed
  notebooks names (`xmr_core.runs.log`: `book/_build/<profile>/<chapter>/<notebook>.runs.jsonl`); never
  `last.pt` (optimiser and RNG state: only needed to resume or extend a run).
- `run-records/<name>/{result.json,metrics.csv}` for every other finished run in the cache (tuning runs no
  notebook loads, older runs): their results, without weights. They are restored under `run-records/`, not
  `runs/`, so `fit` never finds a run without its weights.
- The frozen inputs the logs name: the pretrained trunk (`trunks/<key>/{trunk.pt,meta.json}`) and its grid
  features (`trunks/<key>/features/*.npy`), the region encoder's folder (`scenes/<key>/regions-<key>/`: its
  weights and region features). Run keys hash the features' bytes, and pretraining on another machine differs
  in float noise, so restoring these is what makes the archive's keys the keys this cache computes. The
  features are carried, not recomputed: a forward pass on another CPU may differ in the last bits.

`manifest.json` is the first member: the profile, the commit and training source it was packed at, each
notebook's runs, and per unit (a folder or some files of one) its files with size and SHA-256, per run its
key, method, seed and the commit and training source fingerprint it was trained at (`runs.log.trained_at`).
`pack` refuses runs of other or unknown training source: such an archive could not be restored.

A run's code identity is its method's training sources (`xmr_core.runs.identity`).

`unpack` extracts into a staging folder inside the cache, checking every member against the manifest (a
member not in it, not a regular file, of another size or SHA-256, a path outside the cache's run folders,
a missing member), then that every run was trained by this code's training sources of its method
(`runs.identity.code_problem`), then that nothing in
the cache conflicts (a file the archive holds that exists with other bytes, or a run folder without it);
only then it moves the units into place: a run folder, a run record and a region folder by one rename
(they appear complete or not at all), the trunk's files one by one, completion marker last. Any error is one
line naming the archive and the member, and leaves the cache as it was. Units already in the cache with the
same bytes are skipped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from xmr_core.config import cache_dir
from xmr_core.io import atomic_write, remove_stale_temps, staging_dir
from xmr_core.runs import identity as runidentity
from xmr_core.runs.log import notebook_rank, read_log, run_batches, trained_at
from xmr_core.runs.trace import cold_wall, core_seconds

ARCHIVE_FORMAT = 1
MANIFEST = "manifest.json"
RUN_FILES = ("best.pt", "result.json", "metrics.csv")
RECORD_FILES = ("result.json", "metrics.csv")
RECORDS = "run-records"
UNPACK_STAGING = "unpack"  # unpack stages into `.unpack.<owner tag>.<random>.tmp` in the cache (`io.staging_dir`)
RESTORED_MANIFESTS = "run-archives"  # unpack keeps each archive's manifest here (`xmr runs ls`)
# the only cache folders an archive may write into: the runs, the run records, and the frozen inputs' folders
# (the trunk `encoders/trunk.py`, the region features `data/scenes.py`, the MiniLM token features
# `encoders/token_cache.py`); `collect` refuses to pack an input elsewhere, so no archive it writes is refused
_TOP = ("runs", RECORDS, "trunks", "scenes", "text_features")
_CHUNK = 1 << 20


def archive_name(profile: str) -> str:
    """The archive `xmr runs pack --profile P` writes by default, the name `runs/<profile>.sha256` checks."""
    return f"xmr-runs-{profile}.tar.gz"


class ArchiveError(RuntimeError):
    """A run archive that cannot be packed or restored; the message is one line naming the file."""


@dataclass
class Unit:
    """A folder of the cache (relative, posix) and the files of it that the archive holds, in restore order.
    `whole`: restored only as a whole (a run, a run record, a region folder); else file by file."""

    kind: str  # "run" | "record" | "input"
    dir: str
    files: list[dict[str, Any]]  # {"name", "size", "sha256"}
    whole: bool
    run: dict[str, Any] | None = None  # key, method, seed, commit, source (runs and records)

    def paths(self) -> list[str]:
        return [f"{self.dir}/{f['name']}" for f in self.files]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _file_entry(path: Path) -> dict[str, Any]:
    return {"name": path.name, "size": path.stat().st_size, "sha256": sha256_file(path)}


def profile_logs(profile: str, root: Path) -> dict[str, Path]:
    """Every executed notebook's run log of `profile`, in book order: {"01_pcme/train": path}."""
    build = root / "book" / "_build" / profile
    logs = {p: p.name.removesuffix(".runs.jsonl") for p in build.glob("*/*.runs.jsonl")}
    return {f"{p.parent.name}/{stem}": p for p, stem in sorted(logs.items(),
                                                               key=lambda i: (i[0].parent.name, notebook_rank(i[1])))}


def _relative(path: str, cache: Path, what: str) -> str:
    try:
        return Path(path).resolve().relative_to(cache.resolve()).as_posix()
    except ValueError:
        raise ArchiveError(f"{what}: {path} is outside the cache {cache}") from None


def _run_info(run_dir: Path) -> dict[str, Any]:
    """Key, method, seed, the code a finished run was trained at and its cost in core-seconds
    (`runs.trace.core_seconds`), from its result.json."""
    path = run_dir / "result.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        at = result.get("trained_at") or {}
        return {"key": result["key"], "method": result["run"]["method"], "seed": result["run"]["train"]["seed"],
                "commit": at.get("commit"), "source": at.get("source"), "core_seconds": core_seconds(result)}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ArchiveError(f"{path}: not a readable run result ({type(err).__name__}: {err})") from None


def _code_problem(info: dict[str, Any]) -> str:
    """'' when a run was trained by this code's training sources of its method, else why not (`code_problem`)."""
    return runidentity.code_problem(info["method"], info["commit"], info["source"])


def collect(profile: str, root: Path, cache: Path, echo: Callable[[str], None] = print
            ) -> tuple[list[Unit], dict[str, list[str]]]:
    """The units `pack` archives for `profile`, and each notebook's runs (distinct, in log order)."""
    logs = profile_logs(profile, root)
    if not logs:
        raise ArchiveError(f"{root / 'book' / '_build' / profile}: no run logs; run `xmr book run --profile "
                           f"{profile}` first")
    notebooks: dict[str, list[str]] = {}
    runs: dict[str, Unit] = {}
    inputs: dict[str, Unit] = {}
    for label, log in logs.items():
        names = notebooks.setdefault(label, [])
        for record in read_log(log):
            if record["kind"] == "run":
                rel = _relative(record["run_dir"], cache, f"{log}: run {record['name']}")
                if PurePosixPath(rel).parent.as_posix() != "runs":
                    raise ArchiveError(f"{log}: run {record['name']} is not in the run cache {cache / 'runs'}")
                if rel not in runs:
                    runs[rel] = _run_unit("run", cache / rel, RUN_FILES, str(log))
                if record["name"] not in names:
                    names.append(record["name"])
                continue
            rel = _relative(record["dir"], cache, f"{log}: input")
            if PurePosixPath(rel).parts[0] not in _TOP:
                raise ArchiveError(f"{log}: input {cache / rel} is in none of the cache folders an archive may "
                                   f"restore into ({', '.join(_TOP)})")
            folder = cache / rel
            files = record["files"] if record["files"] is not None else sorted(
                p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
            unit = inputs.setdefault(rel, Unit("input", rel, [], whole=record["files"] is None))
            for name in files:
                if not (folder / name).is_file():
                    raise ArchiveError(f"{log}: input {folder / name} is not in the cache")
                if name not in [f["name"] for f in unit.files]:
                    unit.files.append(_file_entry(folder / name))
    records, left_out = [], []
    for run_dir in sorted((cache / "runs").glob("*/")):
        rel = run_dir.relative_to(cache).as_posix()
        if rel in runs or not (run_dir / "result.json").is_file():
            continue
        unit = _run_unit("record", run_dir, RECORD_FILES, str(run_dir), dest=f"{RECORDS}/{run_dir.name}")
        problem = _code_problem(unit.run or {})
        if problem:
            left_out.append(f"{run_dir.name}, which {problem}")
            continue
        records.append(unit)
    if left_out:
        echo(f"not packed: the results of {len(left_out)} other finished runs of other or unknown code (the first: "
             f"{left_out[0]})")
    for unit in runs.values():
        problem = _code_problem(unit.run or {})
        if problem:
            raise ArchiveError(f"{cache / unit.dir}: {problem}; to pack it, delete it and rerun its notebook, "
                               f"which retrains it with this code")
    return [*inputs.values(), *runs.values(), *records], notebooks


def _run_unit(kind: str, run_dir: Path, names: tuple[str, ...], what: str, dest: str | None = None) -> Unit:
    missing = [n for n in names if not (run_dir / n).is_file()]
    if missing:
        raise ArchiveError(f"{what}: run {run_dir} lacks {', '.join(missing)} (unfinished?)")
    rel = dest or f"runs/{run_dir.name}"
    return Unit(kind, rel, [_file_entry(run_dir / n) for n in names], whole=True, run=_run_info(run_dir))


def _source_path(cache: Path, unit: Unit, name: str) -> Path:
    """Where a unit's file is in the packing cache (a record's files are in its run folder)."""
    folder = cache / "runs" / PurePosixPath(unit.dir).name if unit.kind == "record" else cache / unit.dir
    return folder / name


def pack(profile: str, out: str | Path, *, root: Path | None = None, cache: Path | None = None,
         echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the archive of `profile` to `out` (atomically); returns its manifest. The archive's bytes depend
    only on the cache's files (fixed member order, times and owners)."""
    from xmr_core.config import project_root

    root, cache = root or project_root(), cache or cache_dir()
    t0 = time.perf_counter()
    units, notebooks = collect(profile, root, cache, echo)
    manifest = {"format": ARCHIVE_FORMAT, "profile": profile, "packed_at": trained_at(), "notebooks": notebooks,
                "units": [{"kind": u.kind, "dir": u.dir, "whole": u.whole, "files": u.files, "run": u.run}
                          for u in units]}
    blob = json.dumps(manifest, indent=1).encode()

    def write(fh: IO[bytes]) -> None:
        with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_member(MANIFEST, len(blob)), fileobj=_BytesReader(blob))
            for unit in units:
                for f in unit.files:
                    with open(_source_path(cache, unit, f["name"]), "rb") as src:
                        tar.addfile(_member(f"{unit.dir}/{f['name']}", f["size"]), fileobj=src)

    atomic_write(out, write)
    n_runs = sum(u.kind == "run" for u in units)
    echo(f"packed {n_runs} runs with weights, {sum(u.kind == 'record' for u in units)} run records and "
         f"{sum(len(u.files) for u in units if u.kind == 'input')} input files of {len(notebooks)} notebooks "
         f"(profile {profile}) into {out}: {_size(Path(out).stat().st_size)} in {time.perf_counter() - t0:.1f} s")
    return manifest


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        out, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return out


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


# ------------------------------------------------------------------------------------------------ unpack


def _safe(path: str, archive: Path) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or any(part in ("", ".", "..") for part in path.split("/")) or p.parts[0] not in _TOP:
        raise ArchiveError(f"{archive}: member {path!r} would write outside the cache's run folders")
    return path


def _read_manifest(raw: bytes, archive: Path) -> tuple[dict[str, Any], list[Unit]]:
    try:
        manifest = json.loads(raw)
        if manifest.get("format") != ARCHIVE_FORMAT:
            raise ArchiveError(f"{archive}: archive format {manifest.get('format')!r}, this code reads "
                               f"{ARCHIVE_FORMAT}")
        units = [Unit(u["kind"], u["dir"], u["files"], bool(u["whole"]), u.get("run")) for u in manifest["units"]]
        for unit in units:
            if unit.kind not in ("run", "record", "input") or (unit.kind != "input" and not unit.run):
                raise ArchiveError(f"{archive}: manifest unit {unit.dir!r} of kind {unit.kind!r} is malformed")
            for f in unit.files:
                if "/" in f["name"] or not isinstance(f["size"], int) or len(f["sha256"]) != 64:
                    raise ArchiveError(f"{archive}: manifest entry {unit.dir}/{f['name']} is malformed")
                _safe(f"{unit.dir}/{f['name']}", archive)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ArchiveError(f"{archive}: unreadable {MANIFEST} ({type(err).__name__}: {err})") from None
    return manifest, units


def _extract(archive: Path, staging: Path) -> tuple[dict[str, Any], list[Unit]]:
    """Stream the archive into `staging`, checking every member against the manifest."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile():
                raise ArchiveError(f"{archive}: not a run archive (its first member is not {MANIFEST})")
            manifest, units = _read_manifest(tar.extractfile(first).read(), archive)  # type: ignore[union-attr]
            expected = {f"{u.dir}/{f['name']}": f for u in units for f in u.files}
            seen: set[str] = set()
            while (member := tar.next()) is not None:  # (iterating `tar` would start again at the manifest)
                name = member.name
                if name not in expected or name in seen:
                    raise ArchiveError(f"{archive}: member {name!r} is not in its manifest"
                                       + (" (twice)" if name in seen else ""))
                if not member.isfile():
                    raise ArchiveError(f"{archive}: member {name!r} is not a regular file")
                _copy_checked(tar.extractfile(member), staging / name, expected[name], archive, name)  # type: ignore[arg-type]
                seen.add(name)
            while tar.fileobj.read(_CHUNK):  # to the end of the gzip stream: its length and CRC are checked
                pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as err:
        msg = (str(err).splitlines() or [""])[0]
        raise ArchiveError(f"{archive}: corrupt or truncated archive ({type(err).__name__}: {msg})") from None
    missing = [n for n in expected if n not in seen]
    if missing:
        raise ArchiveError(f"{archive}: truncated: {len(missing)} file(s) of its manifest missing, first {missing[0]}")
    return manifest, units


def _copy_checked(src: IO[bytes], target: Path, entry: dict[str, Any], archive: Path, name: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(target, "wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size != entry["size"] or digest.hexdigest() != entry["sha256"]:
        raise ArchiveError(f"{archive}: member {name} fails its checksum (size {size}, manifest {entry['size']}; "
                           f"sha256 {digest.hexdigest()[:12]}, manifest {entry['sha256'][:12]})")


def _plan(units: list[Unit], staging: Path, cache: Path, archive: Path) -> list[tuple[Path, Path]]:
    """The renames (staged path -> cache path) that restore what the cache lacks; a conflict is an error."""
    moves: list[tuple[Path, Path]] = []
    for unit in units:
        target = cache / unit.dir
        if unit.whole and not target.exists():
            moves.append((staging / unit.dir, target))
            continue
        for f in unit.files:
            path = target / f["name"]
            if not path.is_file():
                if unit.whole:
                    raise ArchiveError(f"{archive}: {path} is missing from a folder that exists in the cache "
                                       f"(an unfinished run?); remove {target} to restore it (nothing restored)")
                moves.append((staging / unit.dir / f["name"], path))
            elif path.stat().st_size != f["size"] or sha256_file(path) != f["sha256"]:
                why = ("this cache pretrained its own frozen inputs, on which its own runs rest: restore into an "
                       f"empty cache (set XMR_CACHE) or remove {target}" if unit.kind == "input"
                       else f"remove {target} to restore it")
                raise ArchiveError(f"{archive}: member {unit.dir}/{f['name']} conflicts with {path}, which holds "
                                   f"other bytes; {why} (nothing restored)")
    return moves


@dataclass
class Restored:
    runs: int  # run folders restored (with weights)
    records: int
    input_files: int
    skipped_units: int  # already in the cache with the same bytes


def unpack(archive: str | Path, *, cache: Path | None = None, echo: Callable[[str], None] = print) -> Restored:
    """Verify `archive` in full, then restore what the cache lacks (see the module docstring)."""
    archive, cache = Path(archive), cache or cache_dir()
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive")
    t0 = time.perf_counter()
    cache.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(cache / UNPACK_STAGING)  # a killed unpack's folder is removed by the next one
    try:
        manifest, units = _extract(archive, staging)
        for unit in units:
            problem = _code_problem(unit.run) if unit.run else ""
            if problem:
                raise ArchiveError(f"{archive}: run {PurePosixPath(unit.dir).name} {problem}; use the archive "
                                   f"with its commit's code")
        moves = _plan(units, staging, cache, archive)
        for n, (src, dst) in enumerate(moves):
            try:
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.rename(src, dst)
            except OSError as err:  # e.g. another process created `dst` meanwhile
                raise ArchiveError(f"{archive}: restoring {dst} failed ({type(err).__name__}: {err}); the {n} "
                                   f"units and files before it were restored whole, nothing after it") from None
        atomic_write(cache / RESTORED_MANIFESTS / f"{manifest['profile']}.json",
                     lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    remove_stale_temps([cache / UNPACK_STAGING])
    moved = {dst for _, dst in moves}
    restored = Restored(
        runs=sum(u.kind == "run" and cache / u.dir in moved for u in units),
        records=sum(u.kind == "record" and cache / u.dir in moved for u in units),
        input_files=sum(cache / p in moved or (cache / u.dir in moved) for u in units if u.kind == "input"
                        for p in u.paths()),
        skipped_units=sum(not (cache / u.dir in moved or any(cache / p in moved for p in u.paths())) for u in units))
    echo(f"restored {restored.runs} runs, {restored.records} run records and {restored.input_files} input files "
         f"from {archive} into {cache} ({restored.skipped_units} already there) in {time.perf_counter() - t0:.1f} s")
    return restored


# ---------------------------------------------------------------------------------------------------- ls


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def notebook_needs(profile: str, root: Path, cache: Path) -> tuple[dict[str, list[str]], str]:
    """Each notebook's runs: from the profile's run logs here, else from the manifest of the profile's archive
    restored into the cache; (needs, where they were read)."""
    logs = profile_logs(profile, root)
    if logs:
        needs = {label: list(dict.fromkeys(r["name"] for r in read_log(log) if r["kind"] == "run"))
                 for label, log in logs.items()}
        return needs, str(root / "book" / "_build" / profile)
    restored = cache / RESTORED_MANIFESTS / f"{profile}.json"
    if restored.is_file():
        return json.loads(restored.read_text(encoding="utf-8"))["notebooks"], str(restored)
    return {}, ""


def cold_walls(profile: str, root: Path, cost: dict[str, float], workers: Sequence[int]) -> str:
    """'1 worker X h, 2 workers Y h, ...': the wall time to train the runs the profile's executed notebooks name
    (`profile_logs`, in book order) from an empty cache, each in the batch that first asks for it, at `cost`
    core-seconds (`runs.trace.cold_wall`); '' without run logs."""
    first: dict[str, tuple[str, int | None]] = {}  # run -> (notebook, batch) of its first request
    for label, log in profile_logs(profile, root).items():
        for name, batch in run_batches(log).items():
            first.setdefault(name, (label, batch))
    runs = [(label, batch, cost.get(name, 0.0)) for name, (label, batch) in first.items()]
    return ", ".join(f"{w} worker{'s' * (w > 1)} {cold_wall(runs, w) / 3600:.2f} h" for w in workers) if runs else ""


def list_cache(profile: str | None = None, *, root: Path | None = None, cache: Path | None = None,
               workers: Sequence[int] = (1, 2, 16), echo: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Print the cache's runs (size, state, the code they were trained by), run records and inputs, and with a
    profile what each of its notebooks needs and what those runs cost (core-hours, per notebook and for the
    profile's distinct runs: the book's cold cost; the wall time to train them at each of `workers`); returns each
    notebook's missing runs."""
    from xmr_core.config import project_root

    root, cache = root or project_root(), cache or cache_dir()
    run_dirs = sorted(p for p in (cache / "runs").glob("*/") if not p.name.startswith("."))
    finished = {p.name for p in run_dirs if (p / "result.json").is_file() and (p / "best.pt").is_file()}
    records = sorted(p.name for p in (cache / RECORDS).glob("*/") if (p / "result.json").is_file())
    trunks = sorted(p for p in (cache / "trunks").glob("*/") if (p / "meta.json").is_file())
    regions = sorted(p for p in (cache / "scenes").glob("*/regions-*/") if (p / "regions_meta.json").is_file())
    total = sum(_folder_size(p) for p in run_dirs)
    echo(f"{cache}: {len(finished)} finished runs, {len(run_dirs) - len(finished)} unfinished ({_size(total)}); "
         f"{len(records)} run records (results only); {len(trunks)} pretrained trunks; {len(regions)} region "
         f"encoders")
    cost: dict[str, float] = {}  # finished run -> core-seconds
    for run_dir in run_dirs:
        if run_dir.name in finished:
            info = _run_info(run_dir)
            cost[run_dir.name] = info["core_seconds"]
            state = f"{info['method']} seed {info['seed']}, " + (_code_problem(info) or "trained by this code")
        else:
            state = "unfinished"
        echo(f"  {run_dir.name:<32} {_size(_folder_size(run_dir)):>9}  {state}")
    missing: dict[str, list[str]] = {}
    if profile is None:
        return missing
    needs, where = notebook_needs(profile, root, cache)
    if not needs:
        echo(f"profile {profile}: no executed notebook's run log here and no restored archive of it; run "
             f"`xmr book run --profile {profile}` or `xmr runs unpack ARCHIVE`")
        return missing
    echo(f"profile {profile}: the runs each notebook loads (from {where}), and what they cost to train")
    for label, names in needs.items():
        missing[label] = [n for n in names if n not in finished]
        gap = f", {len(missing[label])} missing: {' '.join(missing[label])}" if missing[label] else ", none missing"
        echo(f"  {label:<28} {len(names)} runs{gap}; {sum(cost.get(n, 0.0) for n in names) / 3600:.2f} core-h")
    distinct = {n for names in needs.values() for n in names}
    absent = len(distinct - finished)
    echo(f"profile {profile}: {len(distinct)} distinct runs, {sum(cost.get(n, 0.0) for n in distinct) / 3600:.2f} "
         f"core-hours to train them cold (train_seconds x threads, as each result.json records)"
         + (f"; {absent} missing, not counted" if absent else ""))
    if walls := cold_walls(profile, root, cost, workers):
        echo(f"profile {profile}: wall to train them cold, each notebook's batches one after another, a batch's runs "
             f"side by side: {walls}")
    return missing
