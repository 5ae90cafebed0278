"""The run archive (`xmr runs pack / unpack / ls`) on a cache of real tiny `fit` runs: the round trip, and bad
archives (truncated, a flipped byte, a path outside the cache, runs of other code, a conflicting run), each a
one-line error that leaves the target cache as it was."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.corpora import word_split

from xmr_core.book import cli
from xmr_core.config import PROFILES
from xmr_core.data.text import Vocabulary
from xmr_core.encoders import token_cache
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.io import RUN_LOG_ENV, log_input
from xmr_core.liveness import Owner, host_tag
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs import archive as runarchive
from xmr_core.runs import identity as runidentity
from xmr_core.runs import log as runlog
from xmr_core.runs.archive import ArchiveError, list_cache, pack, unpack
from xmr_core.runs.train import TrainConfig, fit, state_fingerprint

TRAIN, VAL = word_split("train", 24, 0), word_split("val", 8, 1)
VOCAB = Vocabulary.build(TRAIN.captions)
VECTORS = np.random.default_rng(2).normal(size=(len(VOCAB), 6)).astype(np.float32)
CFG = TrainConfig(epochs=2, batch_size=8, progress=False, device="cpu")
LOG = "book/_build/smoke/01_demo/train.runs.jsonl"


def _model() -> VSE:
    torch.manual_seed(0)
    cfg = vse0_config(embed_dim=8, image=ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
                      text=TextEncoderConfig(hidden=4))
    return VSE(cfg, VECTORS)


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cache_a(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Cache A: a run a notebook trained (logged), a run no notebook loads (a record), and the frozen inputs
    the notebook logged (a trunk's files, a features file, a region folder)."""
    tmp = tmp_path_factory.mktemp("runarchive")
    cache, root = tmp / "cache_a", tmp / "root"
    log = root / LOG
    log.parent.mkdir(parents=True)
    log.write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XMR_CACHE", str(cache))
        mp.setenv(RUN_LOG_ENV, str(log))
        used = _model()
        result = fit(used, TRAIN, VAL, CFG, vocab=VOCAB)
        trunk, region = cache / "trunks" / "t1", cache / "scenes" / "s1" / "regions-r1"
        for path, data in ((trunk / "trunk.pt", b"weights"), (trunk / "meta.json", b"{}"),
                           (trunk / "features" / "train-abc.npy", b"features"), (trunk / "features" / "x.npy", b"x"),
                           (region / "train_regions.npy", b"regions"), (region / "regions_meta.json", b"{}")):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        log_input(trunk, ["trunk.pt", "meta.json"])
        log_input(trunk / "features", ["train-abc.npy"])
        log_input(region)
        tokens = token_cache.features_dir("ab" * 32)  # where the MiniLM token features are cached
        tokens.mkdir(parents=True)
        (tokens / "features.npy").write_bytes(b"tokens")
        (tokens / "meta.json").write_bytes(b"{}")
        log_input(tokens, ["features.npy", "meta.json"])
        mp.delenv(RUN_LOG_ENV)
        other = fit(_model(), TRAIN, VAL, replace(CFG, seed=1), vocab=VOCAB)  # in no notebook's log
    archive = tmp / "runs.tar.gz"
    manifest = pack("smoke", archive, root=root, cache=cache, echo=lambda _: None)
    return {"cache": cache, "root": root, "archive": archive, "manifest": manifest, "run": result.run_dir.name,
            "other": other.run_dir.name, "state": state_fingerprint(used), "tmp": tmp,
            "tokens": tokens.relative_to(cache).as_posix()}


def _unchanged_after_error(target: Path, archive: Path, match: str) -> str:
    """Unpack `archive` into `target` expecting a one-line `ArchiveError` matching `match`; the target's files
    stay as they were. Returns the message."""
    before = _digests(target)
    with pytest.raises(ArchiveError, match=match) as err:
        unpack(archive, cache=target, echo=lambda _: None)
    message = str(err.value)
    assert "\n" not in message and str(archive) in message
    assert _digests(target) == before and not list(target.glob(".unpack.*"))
    return message


def _repack(src: Path, dst: Path, edit) -> Path:
    """Rewrite archive `src` into `dst`: `edit(members)` changes the [(TarInfo, bytes)] list."""
    with tarfile.open(src, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    members = edit(members)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    dst.write_bytes(gzip.compress(buf.getvalue()))
    return dst


def test_round_trip_restores_runs_records_and_inputs(cache_a: dict, tmp_path: Path, monkeypatch) -> None:
    a, b = cache_a["cache"], tmp_path / "cache_b"
    manifest = cache_a["manifest"]
    assert manifest["notebooks"] == {"01_demo/train": [cache_a["run"]]}
    run = next(u for u in manifest["units"] if u["kind"] == "run")
    assert run["run"]["seed"] == 0 and run["run"]["method"] == "vse" and run["run"]["key"].startswith(
        cache_a["run"].split("-")[-1])
    assert run["run"]["source"] == runlog.source_fingerprint()

    restored = unpack(cache_a["archive"], cache=b, echo=lambda _: None)
    assert (restored.runs, restored.records, restored.input_files, restored.skipped_units) == (1, 1, 7, 0)
    got, want = _digests(b), _digests(a)
    # the used run with its weights (never last.pt), the other one's results only, under run-records/
    for name in runarchive.RUN_FILES:
        assert got[f"runs/{cache_a['run']}/{name}"] == want[f"runs/{cache_a['run']}/{name}"]
    assert not (b / "runs" / cache_a["run"] / "last.pt").exists() and (a / "runs" / cache_a["run"] / "last.pt").exists()
    assert not (b / "runs" / cache_a["other"]).exists()
    assert sorted(p.name for p in (b / "run-records" / cache_a["other"]).iterdir()) == ["metrics.csv", "result.json"]
    # the logged inputs, and only those (features/x.npy was not logged)
    for rel in ("trunks/t1/trunk.pt", "trunks/t1/meta.json", "trunks/t1/features/train-abc.npy",
                "scenes/s1/regions-r1/train_regions.npy", "scenes/s1/regions-r1/regions_meta.json",
                f"{cache_a['tokens']}/features.npy", f"{cache_a['tokens']}/meta.json"):
        assert got[rel] == want[rel]
    assert "trunks/t1/features/x.npy" not in got

    # fit on cache B trains nothing: it loads the same weights, and the run log says so
    log = tmp_path / "again.runs.jsonl"
    monkeypatch.setenv("XMR_CACHE", str(b))
    monkeypatch.setenv(RUN_LOG_ENV, str(log))
    model = _model()
    again = fit(model, TRAIN, VAL, CFG, vocab=VOCAB)
    assert again.cached and again.run_dir.name == cache_a["run"] and state_fingerprint(model) == cache_a["state"]
    assert runlog.describe(log) == ", trained 0 runs, loaded 1"

    # a second unpack restores nothing and changes nothing
    before = _digests(b)
    assert unpack(cache_a["archive"], cache=b, echo=lambda _: None).skipped_units == len(manifest["units"])
    assert _digests(b) == before


def test_pack_is_deterministic(cache_a: dict, tmp_path: Path) -> None:
    again = tmp_path / "again.tar.gz"
    pack("smoke", again, root=cache_a["root"], cache=cache_a["cache"], echo=lambda _: None)
    assert again.read_bytes() == cache_a["archive"].read_bytes()


def test_ls_lists_runs_and_what_each_notebook_lacks(cache_a: dict, tmp_path: Path) -> None:
    lines: list[str] = []
    assert list_cache("smoke", root=cache_a["root"], cache=tmp_path / "empty", echo=lines.append) == {
        "01_demo/train": [cache_a["run"]]}
    assert any("1 missing" in line for line in lines)
    lines.clear()
    assert list_cache("smoke", root=cache_a["root"], cache=cache_a["cache"], echo=lines.append) == {
        "01_demo/train": []}
    assert lines[0].startswith(f"{cache_a['cache']}: 2 finished runs, 0 unfinished")
    assert sum("trained by this code" in line for line in lines) == 2
    # the cost: the notebook's runs and the profile's distinct runs, train_seconds x threads of each result.json
    assert lines[-2].startswith("profile smoke: 1 distinct runs, ")
    copy = tmp_path / "priced"
    shutil.copytree(cache_a["cache"], copy)
    result_file = copy / "runs" / cache_a["run"] / "result.json"
    result = json.loads(result_file.read_text())
    result["train_seconds"], result["run"]["train"]["threads"] = 2700.0, 2  # 1.5 core-hours
    result_file.write_text(json.dumps(result))
    lines.clear()
    list_cache("smoke", root=cache_a["root"], cache=copy, echo=lines.append)
    assert lines[-3].endswith("1 runs, none missing; 1.50 core-h") and lines[-2] == (
        "profile smoke: 1 distinct runs, 1.50 core-hours to train them cold (train_seconds x threads, as each "
        "result.json records)")
    assert lines[-1].endswith(": 1 worker 1.50 h, 2 workers 1.50 h, 16 workers 1.50 h")  # one lone run
    lines.clear()
    list_cache("smoke", root=cache_a["root"], cache=tmp_path / "empty", echo=lines.append)
    assert lines[-2].endswith("0.00 core-hours to train them cold (train_seconds x threads, as each result.json "
                              "records); 1 missing, not counted")
    # without the logs, the restored archive's manifest says what each notebook needs
    b = tmp_path / "b"
    unpack(cache_a["archive"], cache=b, echo=lambda _: None)
    assert list_cache("smoke", root=tmp_path / "no_root", cache=b, echo=lambda _: None) == {"01_demo/train": []}


def test_ls_gives_the_cold_wall_from_the_batches_of_the_run_logs_in_book_order(tmp_path: Path) -> None:
    cache, build = tmp_path / "cache", tmp_path / "root" / "book" / "_build" / "smoke" / "01_demo"
    seconds = {"a": 3600.0, "b": 3600.0, "c": 900.0, "d": 1800.0, "e": 1800.0}
    for name, secs in seconds.items():
        run = cache / "runs" / f"vse-{name * 16}"
        run.mkdir(parents=True)
        (run / "best.pt").write_bytes(b"w")
        (run / "result.json").write_text(json.dumps({"key": name * 64, "train_seconds": secs, "run": {
            "method": "vse", "train": {"seed": 0, "threads": 1}}}))

    def log(notebook: str, records: list[tuple[str, bool, int | None]]) -> None:
        build.mkdir(parents=True, exist_ok=True)
        (build / f"{notebook}.runs.jsonl").write_text("".join(json.dumps(
            {"kind": "run", "name": f"vse-{n * 16}", "run_dir": str(cache / "runs" / f"vse-{n * 16}"), "key": n * 64,
             "method": "vse", "seed": 0, "trained": trained, "batch": batch}) + "\n" for n, trained, batch in records))

    log("train", [("a", True, 1), ("b", True, 1), ("c", True, None)])  # a batch of two, then a lone fit
    # ablate (listed before train by name, run after it): d trained in a worker (no batch there), then loaded in
    # the notebook's batch 1 with e, and a, which train.py trained
    log("ablate", [("d", True, None), ("e", True, None), ("d", False, 1), ("a", False, 1), ("e", False, 1)])
    lines: list[str] = []
    list_cache("smoke", root=tmp_path / "root", cache=cache, workers=(1, 2, 16), echo=lines.append)
    # train {a 1 h, b 1 h} then c 0.25 h alone, ablate {d, e 0.5 h}: 1 worker 2 + 0.25 + 1; 2 workers 1 + 0.25 + 0.5
    assert lines[-1] == ("profile smoke: wall to train them cold, each notebook's batches one after another, a "
                         "batch's runs side by side: 1 worker 3.25 h, 2 workers 1.75 h, 16 workers 1.75 h")


def test_truncated_archive_is_refused_and_nothing_restored(cache_a: dict, tmp_path: Path) -> None:
    data = cache_a["archive"].read_bytes()
    target = tmp_path / "b"
    target.mkdir()
    (target / "keep.txt").write_text("a user's file")
    for cut in (len(data) // 2, len(data) - 30, 40):
        bad = tmp_path / f"cut{cut}.tar.gz"
        bad.write_bytes(data[:cut])
        _unchanged_after_error(target, bad, "truncated")
    # the command prints one line and exits 1
    assert cli.main(["runs", "unpack", str(tmp_path / f"cut{len(data) // 2}.tar.gz")]) == 1


def test_flipped_byte_is_refused(cache_a: dict, tmp_path: Path) -> None:
    target = tmp_path / "b"
    target.mkdir()
    data = bytearray(cache_a["archive"].read_bytes())
    data[len(data) // 2] ^= 0xFF  # in the compressed stream: a gzip or checksum error, whichever comes first
    bad = tmp_path / "flipped.tar.gz"
    bad.write_bytes(bytes(data))
    _unchanged_after_error(target, bad, "corrupt|checksum")
    # a byte of a run's weights, in a well-formed gzip: the member's SHA-256 catches it
    best = f"runs/{cache_a['run']}/best.pt"

    def flip(members):
        return [(m, d[:100] + bytes([d[100] ^ 1]) + d[101:] if m.name == best else d) for m, d in members]

    message = _unchanged_after_error(target, _repack(cache_a["archive"], tmp_path / "f2.tar.gz", flip), "checksum")
    assert best in message


def test_member_outside_the_cache_is_refused(cache_a: dict, tmp_path: Path) -> None:
    target = tmp_path / "cache" / "b"
    target.mkdir(parents=True)

    def extra(members):  # a member the manifest does not list, writing above the cache
        return [*members, (tarfile.TarInfo("../evil.txt"), b"evil")]

    _unchanged_after_error(target, _repack(cache_a["archive"], tmp_path / "t1.tar.gz", extra), "not in its manifest")

    def listed(members):  # the manifest lists it too, with its right checksum
        manifest = json.loads(members[0][1])
        manifest["units"].append({"kind": "input", "dir": "runs/..", "whole": True, "run": None, "files": [
            {"name": "evil.txt", "size": 4, "sha256": hashlib.sha256(b"evil").hexdigest()}]})
        return [(members[0][0], json.dumps(manifest).encode()), *members[1:],
                (tarfile.TarInfo("runs/../evil.txt"), b"evil")]

    _unchanged_after_error(target, _repack(cache_a["archive"], tmp_path / "t2.tar.gz", listed), "outside")

    def link(members):  # a symlink named like a listed member
        info = tarfile.TarInfo(members[1][0].name)
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        return [members[0], (info, b""), *members[2:]]

    _unchanged_after_error(target, _repack(cache_a["archive"], tmp_path / "t3.tar.gz", link), "not a regular file")
    assert not (tmp_path / "cache" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_runs_of_other_code_are_refused(cache_a: dict, tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "b"
    target.mkdir()
    monkeypatch.setattr(runlog, "source_fingerprint", lambda: "0" * 64)  # this code's training sources changed,
    monkeypatch.setattr(runidentity, "method_fingerprint", lambda method: "0" * 64)  # those of every method too
    _unchanged_after_error(target, cache_a["archive"], "trained by other code")
    with pytest.raises(ArchiveError, match="delete it and rerun its notebook"):
        pack("smoke", tmp_path / "x.tar.gz", root=cache_a["root"], cache=cache_a["cache"], echo=lambda _: None)
    assert not (tmp_path / "x.tar.gz").exists()


def test_conflicting_run_in_the_cache_is_an_error(cache_a: dict, tmp_path: Path) -> None:
    target = tmp_path / "b"
    run = target / "runs" / cache_a["run"]
    run.mkdir(parents=True)
    for name in runarchive.RUN_FILES:
        (run / name).write_bytes((cache_a["cache"] / "runs" / cache_a["run"] / name).read_bytes())
    (run / "best.pt").write_bytes(b"other weights")
    message = _unchanged_after_error(target, cache_a["archive"], "conflicts with")
    assert "best.pt" in message and not (target / "trunks").exists()


def test_training_source_fingerprint_covers_training_code_only(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "xmr_core"
    for folder in ("methods", "bench", "runs", "book"):
        (pkg / folder).mkdir(parents=True)
    for rel in ("runs/train.py", "methods/vse.py", "book/runner.py", "bench/cold.py", "runs/log.py"):
        (pkg / rel).write_text("x = 1\n")
    monkeypatch.setattr(runlog, "CHECKOUT", pkg.parent)

    def fingerprint() -> str:
        runlog.source_fingerprint.cache_clear()
        return runlog.source_fingerprint()

    base = fingerprint()
    # the runner, the benchmarks, the tuning protocol and the chapters (which choose runs) change no run
    for rel in ("book/runner.py", "bench/cold.py", "runs/tuning.py", "chapters/pcme.py"):
        (pkg / rel).parent.mkdir(exist_ok=True)
        (pkg / rel).write_text("x = 2\n")
        assert fingerprint() == base
    for rel in ("runs/train.py", "methods/vse.py"):
        (pkg / rel).write_text("x = 3\n")
        assert fingerprint() != base
        base = fingerprint()
    runlog.source_fingerprint.cache_clear()


def committed_package(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    """A git repository at `tmp_path` with one commit of an `xmr_core` package of `files` ({package path: bytes})
    and a `runs/log.py`; returns the package folder and the commit."""
    pkg = tmp_path / "xmr_core"
    for rel, content in (files | {"runs/log.py": b"x = 1\n"}).items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes(content)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return pkg, commit


def test_a_run_is_of_this_code_when_its_commit_had_these_training_sources(tmp_path: Path, monkeypatch) -> None:
    """A run records the fingerprint taken under the `NOT_TRAINING` of its day; at a clean commit, its training
    sources are read back from git under today's rule, so a later change outside them (a chapter, the tuning
    protocol) leaves the run of this code, and a change inside them does not."""
    pkg, commit = committed_package(tmp_path, {rel: b"x = 1\n" for rel in ("runs/train.py", "chapters/pcme.py", "data.json")})
    monkeypatch.setattr(runlog, "CHECKOUT", pkg.parent)

    def problem(commit: str, source: str) -> str:
        runlog.source_fingerprint.cache_clear()
        runlog.source_fingerprint_at.cache_clear()
        return runlog.code_problem(commit, source)

    older = "f" * 64  # what the run recorded under an older rule: not today's fingerprint
    assert problem(commit, older) == ""
    assert runlog.source_fingerprint_at(commit) == runlog.source_fingerprint()
    (pkg / "chapters" / "pcme.py").write_text("x = 2\n")  # the experiment layer changed: the run is still of this code
    assert problem(commit, older) == ""
    assert "other code" in problem(commit + "+dirty", older)  # a dirty tree's sources are not in git
    assert "other code" in problem("0" * 40, older)  # a commit this checkout does not have
    assert "no training source" in problem(commit, "")
    (pkg / "data.json").write_text("{}\n")  # a training source changed
    assert "other code" in problem(commit, older)
    runlog.source_fingerprint.cache_clear()
    runlog.source_fingerprint_at.cache_clear()


def test_runs_from_before_the_training_source_are_not_packed(tmp_path: Path, monkeypatch) -> None:
    """A run whose result.json records no training source (trained before the field) cannot be vouched for:
    `pack` refuses it when a notebook loads it, `ls` says so."""
    cache, root = tmp_path / "cache", tmp_path / "root"
    log = root / LOG
    log.parent.mkdir(parents=True)
    monkeypatch.setenv("XMR_CACHE", str(cache))
    monkeypatch.setenv(RUN_LOG_ENV, str(log))
    run_dir = fit(_model(), TRAIN, VAL, CFG, vocab=VOCAB).run_dir
    result = json.loads((run_dir / "result.json").read_text())
    del result["trained_at"]
    (run_dir / "result.json").write_text(json.dumps(result))
    with pytest.raises(ArchiveError, match="records no training source") as err:
        pack("smoke", tmp_path / "old.tar.gz", root=root, cache=cache, echo=lambda _: None)
    assert str(run_dir) in str(err.value) and not (tmp_path / "old.tar.gz").exists()
    lines: list[str] = []
    list_cache(root=root, cache=cache, echo=lines.append)
    assert "records no training source" in lines[1]


def test_a_killed_unpacks_staging_folder_is_removed_by_the_next_unpack(cache_a: dict, tmp_path: Path) -> None:
    target = tmp_path / "cache_c"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)  # a pid that has exited: the killed unpack's
    here = host_tag(Owner.current().host)
    debris = target / f".{runarchive.UNPACK_STAGING}.{here}-{int(done.stdout)}-0.0badcafe.tmp"
    (debris / "runs").mkdir(parents=True)
    (debris / "runs" / "half.pt").write_bytes(b"half")
    unpack(cache_a["archive"], cache=target, echo=lambda _: None)
    assert not debris.exists() and not list(target.glob(".unpack.*"))


def test_pack_refuses_an_input_in_a_folder_unpack_would_not_restore(tmp_path: Path, monkeypatch) -> None:
    cache, root = tmp_path / "cache", tmp_path / "root"
    log = root / LOG
    log.parent.mkdir(parents=True)
    log.write_text("")
    monkeypatch.setenv("XMR_CACHE", str(cache))
    monkeypatch.setenv(RUN_LOG_ENV, str(log))
    odd = cache / "elsewhere" / "x"
    odd.mkdir(parents=True)
    (odd / "f.npy").write_bytes(b"x")
    log_input(odd, ["f.npy"])
    out = tmp_path / "runs.tar.gz"
    with pytest.raises(ArchiveError, match="elsewhere/x is in none of the cache folders") as err:
        pack("smoke", out, root=root, cache=cache, echo=lambda _: None)
    assert "\n" not in str(err.value) and str(log) in str(err.value) and not out.exists()


def test_committed_archive_checksums_name_the_archive_pack_writes() -> None:
    """`runs/<profile>.sha256` (README: `sha256sum -c runs/cpu.sha256` beside the downloaded archive) holds one
    `sha256sum` line for the file `xmr runs pack --profile <profile>` writes by default."""
    files = sorted((Path(__file__).parents[1] / "runs").glob("*.sha256"))
    assert files, "no committed archive checksum"
    for f in files:
        assert f.stem in PROFILES, f"{f}: not a profile"
        name = runarchive.archive_name(f.stem)
        assert re.fullmatch(rf"[0-9a-f]{{64}}  {re.escape(name)}\n", f.read_text()), f


# A run's code identity is its method's training sources: an edit to one method's file leaves the runs of the
# other methods of this code, an edit to a file they share does not.

SHARED = {"runs/train.py": b"from xmr_core.methods.base import RetrievalModel\n", "losses.py": b"x = 1\n",
          "methods/__init__.py": b"", "methods/base.py": b"x = 1\n",
          "methods/registry.py": b"import importlib\nfrom xmr_core.methods.base import RetrievalModel\n"}
METHODS = {"methods/vse.py": b"from xmr_core.losses import x\n",
           "methods/hrem.py": b"from xmr_core.methods.vse import HingeSchedule\n",
           "methods/pcme.py": b"import torch\n",
           "methods/msrm.py": b"from xmr_core.methods import pcme\n",
           "methods/hmrn.py": b"from .base import x\n"}


def test_a_method_is_computed_by_the_shared_files_and_the_method_files_it_imports() -> None:
    files = SHARED | METHODS
    shared = set(SHARED)
    assert runidentity.method_files("vse", files) == shared | {"methods/vse.py"}
    assert runidentity.method_files("hrem", files) == shared | {"methods/hrem.py", "methods/vse.py"}  # imports VSE's
    assert runidentity.method_files("msrm", files) == shared | {"methods/msrm.py", "methods/pcme.py"}  # `from package import`
    assert runidentity.method_files("hmrn", files) == shared | {"methods/hmrn.py"}  # a relative import of a shared file
    # a shared file that imports a method file makes it part of every method's code
    with_eval = files | {"evaluate.py": b"from xmr_core.methods.hmrn import rounds\n"}
    assert runidentity.method_files("vse", with_eval) == shared | {"evaluate.py", "methods/vse.py", "methods/hmrn.py"}
    with pytest.raises(KeyError, match="methods/gpo.py is not among the training sources"):
        runidentity.method_files("gpo", files)


def _clear_fingerprints() -> None:
    for cached in (runlog.source_fingerprint, runlog.source_fingerprint_at, runidentity._files_here,
                   runidentity._files_at, runidentity.method_fingerprint, runidentity.method_fingerprint_at):
        cached.cache_clear()


def test_a_run_is_of_this_code_while_its_methods_training_sources_are(tmp_path: Path, monkeypatch) -> None:
    pkg, commit = committed_package(tmp_path, SHARED | METHODS)
    monkeypatch.setattr(runlog, "CHECKOUT", pkg.parent)

    def problem(method: str, at: str, source: str) -> str:
        _clear_fingerprints()
        return runidentity.code_problem(method, at, source)

    _clear_fingerprints()
    recorded = runlog.source_fingerprint()  # what runs trained at `commit` record
    assert problem("vse", commit, recorded) == problem("hrem", commit, recorded) == ""
    (pkg / "methods" / "hrem.py").write_bytes(METHODS["methods/hrem.py"] + b"# faster\n")  # one method's file
    assert problem("vse", commit, recorded) == problem("pcme", commit, recorded) == ""
    assert "hrem's training sources at commit" in problem("hrem", commit, recorded)
    # trained at a dirty tree of `commit`: of this code only when the recorded fingerprint is the commit's own
    assert problem("vse", commit + "+dirty", recorded) == ""
    assert "other code" in problem("vse", commit + "+dirty", "f" * 64)
    assert "other code" in problem("vse", "0" * 40, recorded)  # a commit this checkout does not have
    assert "no training source" in problem("vse", commit, "")
    (pkg / "methods" / "vse.py").write_bytes(b"x = 2\n")  # a file HREM imports: VSE's and HREM's runs change
    assert "other code" in problem("vse", commit, recorded) and "other code" in problem("hrem", commit, recorded)
    assert problem("msrm", commit, recorded) == ""
    (pkg / "losses.py").write_bytes(b"x = 2\n")  # a shared file: every method's runs change
    assert all("other code" in problem(m, commit, recorded) for m in ("vse", "pcme", "msrm", "hmrn"))
    _clear_fingerprints()
