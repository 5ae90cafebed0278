"""A run's record: what the one evaluation of a finished run found on its test split, query by query, beside the
run's facts (`docs/records.md`). Tables, figures and claims read records; no model is needed to recompute them.

    SplitQueries   the test split's queries, shared by every run scored on it: sizes, caption -> image, caption
                   levels, each protocol's blocks (folds) and each query's number of positives per block
    QueryStats     one block's per-query values (one view, one direction, one protocol): best rank (where kept),
                   positives in the top R, AP@R (where kept), positives in the top K
    Scored         one scoring of a run (its own test-time score, or with options or a re-ranker): its blocks, the
                   ranks of multi-query rounds, why it collapsed ("" when it learnt), its seconds
    Evaluation     the split's queries and every scoring: what `run_evaluation.evaluate_run` returns
    RunRecord      key, method + config, train config, the fit (training curve, best epoch, stop), tuning facts,
                   timings, and the evaluation
    write_record(path, record) -> the record file (and its split's file beside it, `split_path`)
    read_record(path)          -> RunRecord, validated; `RecordError` (one line: the file and the field) otherwise

On disk a record is one zip of LZMA-compressed `.npy` members (`np.load` reads it) holding a JSON `header` and,
per scoring and block, `<scoring>/<protocol>/<view>/<direction>/<field>`: hit counts, and best ranks where the
evaluation kept them, as the smallest unsigned integer type that holds them, AP@R as float32 where the evaluation
kept it (its only inexact field: a mean over queries agrees with `evaluate` to about 1e-7 relative), multi-query
ranks as `<scoring>/rounds/rank` (T, Q). The numbers of positives depend on the split alone: they live in the
split's file, `splits/<fingerprint[:16]>.npz` beside the records. Written atomically and deterministically (fixed
zip timestamps, sorted JSON): the same record gives the same bytes.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xmr_core.io import atomic_write_bytes

RECORD_FORMAT = 2  # 2: LZMA members, best ranks only where the evaluation kept them (`run_evaluation.RANK_VIEWS`),
# up to its `rank_top`
Block = tuple[str, str, str]  # (protocol, view, direction); a plausible view per ζ: "plausible/zeta{ζ}"
Fold = tuple[int, int, int, int]  # images [i0, i1) and captions [c0, c1) of one fold
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every member's timestamp: the same record gives the same bytes
ZIP = zipfile.ZIP_LZMA  # a member's compression: about a fifth smaller than deflate on a record (docs/records.md)
ROUNDS = "rounds"  # a scoring's multi-query round ranks: `<scoring>/rounds/rank`


class RecordError(ValueError):
    """A record or split file that cannot be read as one: the message names the file and the field."""


def block_name(block: Block) -> str:
    return "/".join(block)


# -------------------------------------------------------------------------------------------------- split


@dataclass(frozen=True)
class SplitQueries:
    """The queries of a test split: image queries (i2t, N) and caption queries (t2i, M) in split order. `folds`:
    per protocol its blocks of images and captions ("full": the whole split); `n_positives`: per block (protocol,
    view, direction) each query's number of positives (Q,) in its fold's gallery; `caption_level` (M,) codes into
    `levels` (empty: the split has none)."""

    name: str
    source: str
    fingerprint: str
    n_images: int
    caption_image: np.ndarray
    folds: dict[str, tuple[Fold, ...]]
    n_positives: dict[Block, np.ndarray]
    levels: tuple[str, ...] = ()
    caption_level: np.ndarray | None = None

    @property
    def n_captions(self) -> int:
        return len(self.caption_image)

    def n_queries(self, direction: str) -> int:
        return self.n_images if direction == "i2t" else self.n_captions

    def gallery(self, direction: str) -> int:
        return self.n_captions if direction == "i2t" else self.n_images

    def fold_queries(self, protocol: str, direction: str) -> list[slice]:
        """Each fold's queries of `direction` under `protocol`."""
        return [slice(i0, i1) if direction == "i2t" else slice(c0, c1) for i0, i1, c0, c1 in self.folds[protocol]]

    @property
    def relative(self) -> str:
        """The split file's path beside the records (`split_path`)."""
        return f"splits/{self.fingerprint[:16]}.npz"


# ------------------------------------------------------------------------------------------------- scores


@dataclass(frozen=True)
class QueryStats:
    """Per-query values of one block, each (Q,): `best_rank` (1-based, pessimistic ties; None where the record does
    not keep it: R@K, medR and meanR need it), `rp_hits` (positives in the top R, R = the query's positives: R-P =
    rp_hits / R), `ap_at_r` (AP@R, float32; None where the record does not keep it), and per K of `precision_hits`
    the positives in the top K (P@K = hits / K)."""

    best_rank: np.ndarray | None
    rp_hits: np.ndarray
    ap_at_r: np.ndarray | None = None
    precision_hits: dict[int, np.ndarray] = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        return {**({"best_rank": self.best_rank} if self.best_rank is not None else {}), "rp_hits": self.rp_hits,
                **({"ap_at_r": self.ap_at_r} if self.ap_at_r is not None else {}),
                **{f"P@{k}_hits": v for k, v in self.precision_hits.items()}}


@dataclass(frozen=True)
class Scored:
    """One scoring of a run: `options` (the test-time score's keyword options, e.g. a similarity), `rerank` (the
    re-ranker's name, "" for none), `blocks` {block: QueryStats}, `rounds` (T, Q) the target's rank of each query set
    after each round (multi-query; None without), `collapse` (`claims.instance_collapse` of its scores, "" when
    the run learnt) and `seconds` (scoring and ranking, after the embedding)."""

    blocks: dict[Block, QueryStats]
    options: dict[str, Any] = field(default_factory=dict)
    rerank: str = ""
    rounds: np.ndarray | None = None
    collapse: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Evaluation:
    """A run scored once on its test split: the split's queries, every scoring by name, the embedding's seconds, and
    `rank_top`: best ranks above it are kept as rank_top + 1 ("beyond"; R@K up to it exact, medR and meanR not
    kept), None: exact ranks."""

    split: SplitQueries
    scorings: dict[str, Scored]
    embed_seconds: float = 0.0
    rank_top: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """One run: its key (`runs.train.run_key`), `name` (its run directory's name, `<method>-<key[:16]>`), method
    and method config, train config, `fit` (best epoch and score, stopped, stop message, converged, best state,
    trained at, and `history`, the training curve), tuning facts (passed in: the tuned setting, the grid it
    bracketed), timings (train seconds, pairs per second, embedding and scoring seconds) and its evaluation."""

    key: str
    name: str
    method: str
    config: dict[str, Any]
    train: dict[str, Any]
    fit: dict[str, Any]
    tuning: dict[str, Any]
    timings: dict[str, Any]
    evaluation: Evaluation

    @property
    def seed(self) -> int:
        return int(self.train["seed"])

    @property
    def converged(self) -> bool:
        return bool(self.fit["converged"])


# ----------------------------------------------------------------------------------------- writing, reading


def compact(values: np.ndarray) -> np.ndarray:
    """Non-negative integers as the smallest unsigned type that holds them (uint8, 16, 32 or 64)."""
    a = np.asarray(values)
    if a.size and (not np.issubdtype(a.dtype, np.integer) or int(a.min()) < 0):
        raise ValueError(f"compact: expects non-negative integers, got {a.dtype} from {a.min()}")
    top = int(a.max()) if a.size else 0
    return a.astype(next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if top <= np.iinfo(t).max))


def _pack(header: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """A zip of `.npy` members, `header` (JSON, listing every array's dtype and shape) first; LZMA (`ZIP`), fixed
    timestamps."""
    listed = {name: {"dtype": a.dtype.str, "shape": list(a.shape)} for name, a in arrays.items()}
    members = {"header": np.frombuffer(json.dumps({**header, "arrays": listed}, sort_keys=True).encode(), np.uint8),
               **arrays}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", ZIP) as zf:
        for name, a in members.items():
            info = zipfile.ZipInfo(f"{name}.npy", ZIP_TIME)
            info.compress_type = ZIP
            with zf.open(info, "w") as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(a), allow_pickle=False)
    return buffer.getvalue()


def _unpack(path: Path, kind: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and every array of a record or split file, checked against the header's list (present, dtype,
    shape, finite) and its format and kind; `RecordError` naming the file and the field otherwise."""
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as err:  # noqa: BLE001 - a missing, truncated or foreign file: all mean "not a record"
        raise RecordError(f"{path}: not a readable {kind} ({type(err).__name__}: {_line(err)})") from None
    with npz:
        def member(name: str) -> np.ndarray:
            if name not in npz.files:
                raise RecordError(f"{path}: field {name!r} is missing")
            try:
                return npz[name]
            except Exception as err:  # noqa: BLE001 - a truncated or corrupt member
                raise RecordError(f"{path}: field {name!r} is truncated or corrupt ({type(err).__name__}: "
                                  f"{_line(err)})") from None

        try:
            header = json.loads(member("header").tobytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RecordError(f"{path}: field 'header' is not JSON ({_line(err)})") from None
        if not isinstance(header, dict) or header.get("kind") != kind:
            raise RecordError(f"{path}: field 'header' is not a {kind}'s (kind {header.get('kind')!r})"
                              if isinstance(header, dict) else f"{path}: field 'header' is not a JSON object")
        if header.get("format") != RECORD_FORMAT:
            raise RecordError(f"{path}: field 'header': format {header.get('format')!r}, this code reads format "
                              f"{RECORD_FORMAT}")
        listed = header.get("arrays", {})
        extra = sorted(set(npz.files) - set(listed) - {"header"})
        if extra:
            raise RecordError(f"{path}: field {extra[0]!r} is not in the header's list of arrays")
        arrays = {}
        for name, spec in listed.items():
            a = member(name)
            if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str) or not isinstance(
                    spec.get("shape"), list):
                raise RecordError(f"{path}: field 'header' lists {name!r} without a dtype and shape")
            if a.dtype.str != spec["dtype"] or list(a.shape) != spec["shape"]:
                raise RecordError(f"{path}: field {name!r} is {a.dtype.name} {list(a.shape)}, the header says "
                                  f"{spec['dtype']} {spec['shape']}")
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                raise RecordError(f"{path}: field {name!r} has a NaN or inf at {int(np.flatnonzero(~np.isfinite(a))[0])}")
            arrays[name] = a
    return header, arrays


def _line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0]


def _expect(path: Path, name: str, a: np.ndarray, shape: tuple[int, ...], kind: str = "u") -> np.ndarray:
    if a.shape != shape or a.dtype.kind != kind:
        raise RecordError(f"{path}: field {name!r} is {a.dtype.name} {list(a.shape)}, expected "
                          f"{'unsigned integers' if kind == 'u' else 'floats'} {list(shape)}")
    return a


def split_path(record_path: str | Path, split: SplitQueries) -> Path:
    """Where the split file of a record at `record_path` lives: `splits/<fingerprint[:16]>.npz` beside it."""
    return Path(record_path).parent / split.relative


def write_split(path: str | Path, split: SplitQueries) -> Path:
    header = {"kind": "split queries", "format": RECORD_FORMAT, "name": split.name, "source": split.source,
              "fingerprint": split.fingerprint, "n_images": split.n_images, "levels": list(split.levels),
              "folds": {p: [list(f) for f in folds] for p, folds in split.folds.items()},
              "blocks": [list(b) for b in split.n_positives]}
    arrays = {"caption_image": compact(split.caption_image),
              **({"caption_level": compact(split.caption_level)} if split.caption_level is not None else {}),
              **{f"{block_name(b)}/n_positives": compact(v) for b, v in split.n_positives.items()}}
    return atomic_write_bytes(path, _pack(header, arrays))


def read_split(path: str | Path) -> SplitQueries:
    path = Path(path)
    header, arrays = _unpack(path, "split queries")
    try:
        n, levels = int(header["n_images"]), tuple(header["levels"])
        folds = {p: tuple(tuple(int(x) for x in f) for f in fs) for p, fs in header["folds"].items()}
        blocks = [tuple(b) for b in header["blocks"]]
    except (KeyError, TypeError, ValueError) as err:
        raise RecordError(f"{path}: field 'header' lacks or garbles {_line(err)}") from None
    cap = arrays.get("caption_image")
    if cap is None:
        raise RecordError(f"{path}: field 'caption_image' is missing")
    m = len(cap)
    level = arrays.get("caption_level")
    if levels and (level is None or level.shape != (m,) or int(level.max(initial=0)) >= len(levels)):
        raise RecordError(f"{path}: field 'caption_level' must be ({m},) codes of the {len(levels)} levels")
    split = SplitQueries(header["name"], header["source"], header["fingerprint"], n, cap, folds, {}, levels,
                         level if levels else None)
    for b in blocks:
        name = f"{block_name(b)}/n_positives"
        if b[0] not in folds:
            raise RecordError(f"{path}: field {name!r}: protocol {b[0]!r} has no folds")
        split.n_positives[b] = _expect(path, name, arrays.get(name, np.empty(0)), (split.n_queries(b[2]),))
    return split


def _record_header(record: RunRecord) -> dict[str, Any]:
    ev = record.evaluation
    return {"kind": "run record", "format": RECORD_FORMAT, "key": record.key, "name": record.name,
            "method": record.method, "config": record.config, "train": record.train, "fit": record.fit,
            "tuning": record.tuning, "timings": record.timings, "embed_seconds": ev.embed_seconds,
            "rank_top": ev.rank_top,
            "split": {"fingerprint": ev.split.fingerprint, "name": ev.split.name, "file": ev.split.relative,
                      "n_images": ev.split.n_images, "n_captions": ev.split.n_captions},
            "scorings": {name: {"options": s.options, "rerank": s.rerank, "collapse": s.collapse,
                                "seconds": s.seconds, "blocks": [list(b) for b in s.blocks],
                                "precision_ks": sorted({k for q in s.blocks.values() for k in q.precision_hits}),
                                "rounds": 0 if s.rounds is None else int(s.rounds.shape[0])}
                         for name, s in ev.scorings.items()}}


def write_record(path: str | Path, record: RunRecord) -> Path:
    """Write `record` to `path` (atomically) and its split's queries to `split_path` (when not there already)."""
    ev = record.evaluation
    arrays: dict[str, np.ndarray] = {}
    for name, s in ev.scorings.items():
        missing = [b for b in s.blocks if b not in ev.split.n_positives]
        if missing:
            raise ValueError(f"{record.name}: scoring {name!r} has block {missing[0]} that its split has not")
        for b, q in s.blocks.items():
            for fld, v in q.arrays().items():
                arrays[f"{name}/{block_name(b)}/{fld}"] = (np.asarray(v, np.float32) if fld == "ap_at_r"
                                                           else compact(v))
        if s.rounds is not None:
            arrays[f"{name}/{ROUNDS}/rank"] = compact(s.rounds)
    _keep_split(split_path(path, ev.split), ev.split)
    return atomic_write_bytes(path, _pack(_record_header(record), arrays))


def _keep_split(path: Path, split: SplitQueries) -> None:
    """Write `split` to its file, or add its blocks to the file there (another run's record may keep other blocks:
    the COCO 1K protocol in more views); a block both hold must agree. A file there that cannot be read (of an
    older record format, or damaged) is written anew, said in one line: it is derived from the split alone, and a
    record that needed one of its lost blocks fails its read and is scored again."""
    if not path.is_file():
        write_split(path, split)
        return
    try:
        held = read_split(path)
    except RecordError as err:
        print(f"writing the split file anew: {err}")
        write_split(path, split)
        return
    if (held.fingerprint, held.n_images, held.n_captions) != (split.fingerprint, split.n_images, split.n_captions):
        raise RecordError(f"{path}: holds split {held.fingerprint[:16]}, not {split.fingerprint[:16]}")
    new = {b: v for b, v in split.n_positives.items() if b not in held.n_positives}
    clash = [b for b, v in split.n_positives.items() if b in held.n_positives and
             not np.array_equal(held.n_positives[b], v)]
    if clash:
        raise RecordError(f"{path}: field {block_name(clash[0]) + '/n_positives'!r} differs from this evaluation's")
    if new:
        write_split(path, SplitQueries(**{**held.__dict__, "folds": {**split.folds, **held.folds},
                                          "n_positives": {**held.n_positives, **new}}))


def read_record(path: str | Path, splits: dict[Path, SplitQueries] | None = None) -> RunRecord:
    """The record at `path`, validated (format, every field's dtype, shape and finiteness, ranks within the gallery,
    the split it names); its split's queries read from beside it, or from `splits` ({split file: queries}, a cache
    the caller keeps across records, filled here)."""
    path = Path(path)
    header, arrays = _unpack(path, "run record")
    splits = {} if splits is None else splits
    try:
        sp, top = header["split"], header["rank_top"]
        file = path.parent / sp["file"]
        split = splits[file] = splits[file] if file in splits else read_split(file)
        if split.fingerprint != sp["fingerprint"] or (split.n_images, split.n_captions) != (sp["n_images"],
                                                                                           sp["n_captions"]):
            raise RecordError(f"{path}: field 'header': split {sp['fingerprint'][:16]} ({sp['n_images']} x "
                              f"{sp['n_captions']}), but its split file holds {split.fingerprint[:16]} "
                              f"({split.n_images} x {split.n_captions})")
        scorings = {}
        for name, meta in header["scorings"].items():
            blocks = {}
            for b in (tuple(b) for b in meta["blocks"]):
                if b not in split.n_positives:
                    raise RecordError(f"{path}: field {name}/{block_name(b)}: a block its split file has not")
                q, gallery = (split.n_queries(b[2]),), split.gallery(b[2])
                highest = gallery if top is None else min(gallery, int(top) + 1)
                prefix = f"{name}/{block_name(b)}"
                hits = _expect(path, f"{prefix}/rp_hits", arrays.get(f"{prefix}/rp_hits", np.empty(0)), q)
                # best ranks and AP@R where the evaluation kept them (the header lists them)
                rank, ap = arrays.get(f"{prefix}/best_rank"), arrays.get(f"{prefix}/ap_at_r")
                rank = None if rank is None else _expect(path, f"{prefix}/best_rank", rank, q)
                ap = None if ap is None else _expect(path, f"{prefix}/ap_at_r", ap, q, "f")
                if rank is not None and (int(rank.min(initial=1)) < 1 or int(rank.max(initial=1)) > highest):
                    raise RecordError(f"{path}: field {prefix + '/best_rank'!r} has a rank outside 1..{highest}")
                at_k = {int(k): _expect(path, f"{prefix}/P@{k}_hits", arrays.get(f"{prefix}/P@{k}_hits",
                                                                                  np.empty(0)), q)
                        for k in meta["precision_ks"]}
                blocks[b] = QueryStats(rank, hits, ap, at_k)
            rounds = None
            if meta["rounds"]:
                rounds = _expect(path, f"{name}/{ROUNDS}/rank", arrays.get(f"{name}/{ROUNDS}/rank", np.empty(0)),
                                 (int(meta["rounds"]), split.n_images))
            scorings[name] = Scored(blocks, meta["options"], meta["rerank"], rounds, meta["collapse"],
                                    float(meta["seconds"]))
        evaluation = Evaluation(split, scorings, float(header["embed_seconds"]), None if top is None else int(top))
        return RunRecord(header["key"], header["name"], header["method"], header["config"], header["train"],
                         header["fit"], header["tuning"], header["timings"], evaluation)
    except (KeyError, TypeError) as err:
        raise RecordError(f"{path}: field 'header' lacks or garbles {_line(err)}") from None
