"""Write a `Corpus` (in particular the scenes benchmark) in a real format, and read such an export back.

`export_corpus(corpus, out_dir, fmt)` writes the format's own files (see `xmr_core.data.formats.<fmt>`),
then, per split, a sidecar `xmr_<split>.npz` with every non-empty field the format has no place for
(`formats.sidecar`), then `xmr_export.json`: the format, the split names, the reader arguments the data
needs (captions per image, regions per image, ...) and the corpus `meta` that is JSON-serialisable.
The export is written into a staging directory renamed onto `out_dir` when complete (one rename instead
of an fsync per file), and the manifest is its last file.

`read_export(out_dir)` reads it back through the same reader as real data; the round trip gives the
same ids, captions, pixels, features and relevance as the exported corpus (`image_paths` then point at
the exported files).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.formats.coco_instances import write_coco_instances
from xmr_core.data.formats.common import require, write_text
from xmr_core.data.formats.cub import read_cub, write_cub
from xmr_core.data.formats.drilldown import read_drilldown, write_drilldown
from xmr_core.data.formats.karpathy import read_karpathy, write_karpathy
from xmr_core.data.formats.precomp import NATIVE_FIELDS as PRECOMP_FIELDS
from xmr_core.data.formats.precomp import read_precomp, write_precomp_split
from xmr_core.data.formats.sidecar import SIDECAR_FIELDS, write_sidecar
from xmr_core.io import remove_stale_temps, staging_dir, temp_name

FORMATS: tuple[str, ...] = ("precomp", "karpathy", "cub", "drilldown")
MANIFEST = "xmr_export.json"
EXPORT_VERSION = 1
CONTENT_FIELDS: tuple[str, ...] = (
    "image_ids", "caption_ids", "captions", "caption_image", "images", "regions", "region_boxes",
    "image_class", "class_names", "image_labels", "exact", "caption_level", "queries",
)  # fmt: skip


def content_diff(a: Split, b: Split) -> list[str]:
    """The `CONTENT_FIELDS` in which two splits differ (value, shape or dtype; absent vs present)."""
    out = []
    for f in CONTENT_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        if x is None or y is None:
            same = x is None and y is None
        elif isinstance(x, list) or isinstance(y, list):
            same = list(x) == list(y)
        else:
            x, y = np.asarray(x), np.asarray(y)
            same = x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        if not same:
            out.append(f)
    return out


def jsonable_meta(meta: dict) -> dict:
    """The entries of `meta` that JSON can hold."""
    out = {}
    for key, value in meta.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def _karpathy(corpus: Corpus, out_dir: Path, progress: bool) -> tuple[list[str], dict]:
    splits = list(corpus.splits.values())
    json_name = f"dataset_{corpus.name}.json"
    write_karpathy(splits, out_dir / json_name, corpus.name, progress=progress)
    native = ["image_ids", "caption_ids", "captions", "caption_image", "images"]
    args: dict = {"json": json_name, "instances": []}
    all_ids = [i for s in splits for i in s.image_ids]
    # COCO instances hold 0/1 concept labels keyed by image id: ids must be unique across the splits
    binary = all(s.image_labels is not None and np.isin(s.image_labels, (0, 1)).all() for s in splits)
    if binary and len(set(all_ids)) == len(all_ids):
        n_labels = splits[0].image_labels.shape[1]
        names = (
            corpus.meta.get("label_names")
            or corpus.meta.get("concepts")
            or [f"concept_{c}" for c in range(n_labels)]
        )
        for s in splits:
            path = f"annotations/instances_{s.name}.json"
            write_coco_instances(out_dir / path, s.image_ids, s.image_labels, names)
            args["instances"].append(path)
        native.append("image_labels")
    return native, args


def _precomp(corpus: Corpus, out_dir: Path, progress: bool) -> tuple[list[str], dict]:
    ks = {write_precomp_split(s, out_dir) for s in corpus.splits.values()}
    if len(ks) != 1:
        raise ValueError(
            f"corpus {corpus.name!r}: precomp needs one caption count per image, splits have {sorted(ks)}"
        )
    return list(PRECOMP_FIELDS), {"captions_per_image": ks.pop()}


def _cub(corpus: Corpus, out_dir: Path, progress: bool) -> tuple[list[str], dict]:
    split = corpus.meta.get("class_split")  # scenes: {"seen": [...], "unseen": [...]} class indices
    classes = {"trainval": split["seen"], "test": split["unseen"]} if split and "seen" in split else None
    k, lists = write_cub(list(corpus.splits.values()), out_dir, class_split=classes, progress=progress)
    native = ["image_ids", "captions", "caption_image", "images", "image_class", "class_names"]
    return native, {"captions_per_image": k, "image_lists": lists}


def _drilldown(corpus: Corpus, out_dir: Path, progress: bool) -> tuple[list[str], dict]:
    splits = list(corpus.splits.values())
    kept_ids = write_drilldown(splits, out_dir, progress=progress)
    native = ["queries", "regions", "region_boxes", "images"] + (["image_ids"] if kept_ids else [])
    args = {
        "n_regions": int(splits[0].regions.shape[1]),
        "min_queries": min(len(q) for s in splits for q in s.queries),
        "dedupe": False,
    }
    return native, args


_WRITERS = {"precomp": _precomp, "karpathy": _karpathy, "cub": _cub, "drilldown": _drilldown}


def export_corpus(corpus: Corpus, out_dir: str | Path, fmt: str, *, progress: bool = True) -> Path:
    """Write `corpus` to `out_dir` in format `fmt` (one of `FORMATS`) with sidecars and manifest.

    Everything is written into a staging directory beside `out_dir` that is renamed onto it at the end,
    so `out_dir` is either absent, the previous export, or complete; an existing `out_dir` is replaced."""
    if fmt not in _WRITERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = staging_dir(out_dir)  # a killed export's folder is removed by the next complete one
    try:
        native, reader_args = _WRITERS[fmt](corpus, stage, progress)
        sidecar_dir = stage / "caches" if fmt == "drilldown" else stage
        sidecars = {}
        for split in corpus.splits.values():
            fields = [f for f in SIDECAR_FIELDS if f not in native and getattr(split, f) is not None]
            if write_sidecar(sidecar_dir, split, fields) is not None:
                sidecars[split.name] = fields
        manifest = {
            "xmr_export_version": EXPORT_VERSION,
            "format": fmt,
            "corpus": corpus.name,
            "splits": list(corpus.splits),
            "reader_args": reader_args,
            "sidecar_fields": sidecars,
            "meta": jsonable_meta(corpus.meta),
        }
        write_text(stage / MANIFEST, json.dumps(manifest, indent=1))
        old = temp_name(out_dir)
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(stage, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    remove_stale_temps([out_dir])
    return out_dir


def read_export(
    out_dir: str | Path,
    splits: Sequence[str] | None = None,
    *,
    load_images: bool = True,
    progress: bool = False,
) -> Corpus:
    """Read a directory written by `export_corpus` through its format's reader."""
    out_dir = Path(out_dir)
    path = require(out_dir / MANIFEST, "export manifest (the export did not finish)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        fmt, args = manifest["format"], dict(manifest["reader_args"])
        splits = list(splits) if splits is not None else list(manifest["splits"])
    except (ValueError, KeyError, TypeError) as e:
        raise DataFormatError(f"{path}: malformed export manifest ({e})") from None
    if manifest.get("xmr_export_version") != EXPORT_VERSION:
        raise DataFormatError(
            f"{path}: export version {manifest.get('xmr_export_version')}, expected {EXPORT_VERSION}"
        )
    if fmt == "precomp":
        corpus = read_precomp(out_dir, splits, **args)
    elif fmt == "karpathy":
        instances = [out_dir / p for p in args.pop("instances")]
        corpus = read_karpathy(
            out_dir / args.pop("json"), out_dir / "images", splits,
            instances=instances, load_images=load_images, progress=progress, **args,
        )  # fmt: skip
    elif fmt == "cub":
        corpus = read_cub(out_dir, splits, load_images=load_images, progress=progress, **args)
    elif fmt == "drilldown":
        with_pixels = load_images and (out_dir / "vg" / "VG_100K").is_dir()
        corpus = read_drilldown(out_dir, splits, load_images=with_pixels, progress=progress, **args)
    else:
        raise DataFormatError(f"{path}: unknown format {fmt!r}")
    corpus.name = manifest["corpus"]
    corpus.meta = {**corpus.meta, **manifest["meta"], "format": fmt, "export_dir": str(out_dir)}
    return corpus
