"""Drill-down's Visual Genome layout for multi-query retrieval (Drill-down, NeurIPS 2019; HMRN).

Layout under `root` (Drill-down's `data/` directory):

- `caches/vg_{train,val,test}.txt`: one integer image index per line (92,105 / 5,000 / 9,896 images);
- `vg/rg_jsons/<index>.json`: `{"regions": [{"region_id", "phrase", "x", "y", "width", "height", ...}]}`;
- `vg/region_36_final/<index zero-padded to 12>.npy`: despite the name a pickle (Python 2, read with
  `encoding="latin1"`) of a dict with `region_feats` (R, D), `region_boxes` (R, 4) and `region_clses`;
- `vg/VG_100K/<index>.jpg`, `vg/VG_100K_2/<index>.jpg`: the images (optional here).

The region phrases of an image, in region-id order, are its queries (Drill-down sorts by region id and
drops a phrase identical, lower-cased, to an earlier one: `dedupe`); the split files list only images with
at least `min_queries` (10 rounds) phrases, so fewer is an error. Captions are the queries flattened (one
caption per phrase, id `<index>/<region id>`). Every image must have exactly `n_regions` feature rows.
The pickles are read with an unpickler that accepts numpy arrays only.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from xmr_core.data.corpus import Corpus, DataFormatError, Split, check_finite
from xmr_core.data.formats.common import (
    check_disjoint,
    check_numeric,
    find_image,
    first_repeat,
    json_field,
    json_int,
    json_record,
    json_text,
    load_pixels,
    read_json,
    read_lines,
    require,
    write_file,
    write_lines,
    write_png,
    write_text,
)  # fmt: skip
from xmr_core.data.formats.sidecar import apply_sidecar
from xmr_core.io import atomic_write, remove_stale_temps, temp_name

INDEX = re.compile(r"0|[1-9][0-9]*")
_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("copyreg", "_reconstructor"), ("builtins", "object"),
    ("_codecs", "encode"),
}  # fmt: skip


class _NumpyUnpickler(pickle.Unpickler):
    """Unpickles dicts of numpy arrays and nothing that could run code."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _NUMPY_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a region feature file")
        return super().find_class(module, name)


def region_file(root: Path, index: int) -> Path:
    return root / "vg" / "region_36_final" / f"{index:012d}.npy"


def _read_regions(
    path: Path, index: int, n_regions: int, dims: int | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Image `index`'s checked (R, D) float32 features and (R, 4) boxes (None when the file has none)."""
    require(path, "Drill-down region features")
    try:
        with open(path, "rb") as fh:
            data = _NumpyUnpickler(fh, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise DataFormatError(f"{path}: unreadable region pickle ({e})") from None
    if not isinstance(data, dict) or "region_feats" not in data:
        raise DataFormatError(f"{path}: no 'region_feats' in the region pickle")
    feats = check_numeric(data["region_feats"], path, "region_feats").astype(np.float32)
    want = (n_regions, dims if dims is not None else "D")
    if feats.ndim != 2 or feats.shape[0] != n_regions or (dims is not None and feats.shape[1] != dims):
        raise DataFormatError(f"{path}: region_feats of shape {feats.shape}, expected ({want[0]}, {want[1]})")
    check_finite(feats[None], path, [str(index)])
    if "region_boxes" not in data:
        return feats, None
    boxes = check_numeric(data["region_boxes"], path, "region_boxes").astype(np.float32)
    if boxes.shape != (n_regions, 4):
        raise DataFormatError(f"{path}: region_boxes of shape {boxes.shape}, expected ({n_regions}, 4)")
    if not np.isfinite(boxes).all():
        raise DataFormatError(f"{path}: region_boxes contain NaN or inf")
    return feats, boxes


def _split_indices(path: Path, split: str) -> list[int]:
    """The split file: one image index a line (digits, no sign or leading zero), none twice, at least one."""
    lines = read_lines(path, f"image index of split {split!r}")
    for i, line in enumerate(lines):
        if not INDEX.fullmatch(line):
            raise DataFormatError(f"{path}: line {i + 1}: {line!r} is not an image index")
    repeat = first_repeat(lines)
    if repeat is not None:
        raise DataFormatError(
            f"{path}: line {repeat[0] + 1}: image {lines[repeat[0]]} repeats line {repeat[1] + 1}"
        )
    if not lines:
        raise DataFormatError(f"{path}: no images in split {split!r}")
    return [int(line) for line in lines]


def _queries(path: Path, index: int, dedupe: bool, min_queries: int) -> tuple[list[int], list[str]]:
    """The region graph's checked (region ids, phrases) in region-id order, deduplicated when `dedupe`."""
    data = read_json(path, "Drill-down region graph")
    if not isinstance(data, dict) or not isinstance(data.get("regions"), list):
        raise DataFormatError(f"{path}: no 'regions' list (not a Drill-down region graph)")
    if "image_id" in data and json_int(data["image_id"], str(path), "image_id") != index:
        raise DataFormatError(f"{path}: image_id {data['image_id']!r} is not the file's image {index}")
    pairs = []
    for i, region in enumerate(data["regions"]):
        where = f"{path}: regions[{i}]"
        rid = json_int(json_field(json_record(region, where), "region_id", where), where, "region_id")
        where = f"{path}: region {rid}"
        pairs.append((rid, json_text(json_field(region, "phrase", where), where, "caption")))
    repeat = first_repeat([rid for rid, _ in pairs])
    if repeat is not None:
        raise DataFormatError(
            f"{path}: regions[{repeat[0]}]: region_id {pairs[repeat[0]][0]} repeats regions[{repeat[1]}]"
        )
    rids, phrases, seen = [], [], set()
    for rid, phrase in sorted(pairs):
        if dedupe:
            if phrase.lower() in seen:
                continue
            seen.add(phrase.lower())
        rids.append(rid)
        phrases.append(phrase)
    if len(phrases) < min_queries:
        raise DataFormatError(f"{path}: {len(phrases)} region captions, expected at least {min_queries}")
    return rids, phrases


def read_drilldown_split(
    root: str | Path,
    split: str,
    *,
    n_regions: int = 36,
    min_queries: int = 10,
    dedupe: bool = True,
    load_images: bool = False,
    features_cache: str | Path | None = None,
    progress: bool = False,
) -> Split:
    """Read one split. With `features_cache`, the (N, R, D) features are assembled once into that `.npy`
    (memory-mapped: the full VG train split is 27 GB) and read from it on later calls."""
    root = Path(root)
    split_file = root / "caches" / f"vg_{split}.txt"
    indices = _split_indices(split_file, split)
    image_ids = [str(i) for i in indices]
    queries, caption_ids = [], []
    for index in tqdm(indices, desc=f"read {split} region graphs", disable=not progress):
        rids, phrases = _queries(root / "vg" / "rg_jsons" / f"{index}.json", index, dedupe, min_queries)
        queries.append(phrases)
        caption_ids.extend(f"{index}/{rid}" for rid in rids)
    regions, boxes = _features(root, indices, n_regions, features_cache, progress)
    image_dirs = [root / "vg" / d for d in ("VG_100K", "VG_100K_2") if (root / "vg" / d).is_dir()]
    image_paths = None
    if image_dirs:
        image_paths = []
        for index in indices:
            found = next((p for p in (find_image(d / str(index)) for d in image_dirs) if p is not None), None)
            if found is None:
                raise DataFormatError(f"{image_dirs[0] / str(index)}.jpg: missing image of split {split!r}")
            image_paths.append(str(found))
    elif load_images:
        raise DataFormatError(f"{root / 'vg' / 'VG_100K'}: missing (Visual Genome images); see docs/data.md")
    out = Split(
        name=split,
        source=str(root),
        image_ids=image_ids,
        caption_ids=caption_ids,
        captions=[q for qs in queries for q in qs],
        caption_image=np.repeat(np.arange(len(indices), dtype=np.int64), [len(qs) for qs in queries]),
        image_paths=image_paths,
        regions=regions,
        region_boxes=boxes,
        queries=queries,
        meta={"format": "drilldown", "image_ids_file": str(split_file)},
    )
    if load_images:
        out.images = load_pixels(image_paths, progress=progress)
    return apply_sidecar(out, root / "caches", split).validate()


def _features(
    root: Path, indices: list[int], n_regions: int, cache: str | Path | None, progress: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """(N, R, D) float32 features and (N, R, 4) boxes (None when the pickles have none)."""
    cache = Path(cache) if cache is not None else None
    if cache is not None and cache.exists():
        feats = np.load(cache, mmap_mode="r")
        if feats.shape[:2] != (len(indices), n_regions):
            raise DataFormatError(
                f"{cache}: cached features of shape {feats.shape} for {len(indices)} images (delete it to rebuild)"
            )
        boxes_path = cache.with_suffix(".boxes.npy")
        return feats, np.load(boxes_path) if boxes_path.exists() else None
    feats = boxes = None
    tmp = temp_name(cache) if cache is not None else None  # a killed reader's is removed by the next (`io`)
    if tmp is not None:
        tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        for row, index in enumerate(tqdm(indices, desc="read region features", disable=not progress)):
            path = region_file(root, index)
            f, b = _read_regions(path, index, n_regions, feats.shape[2] if feats is not None else None)
            if feats is None:
                shape = (len(indices), n_regions, f.shape[1])
                feats = (
                    np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
                    if tmp
                    else np.empty(shape, np.float32)
                )
                boxes = np.empty((len(indices), n_regions, 4), np.float32) if b is not None else None
            if (b is None) != (boxes is None):
                raise DataFormatError(f"{path}: region_boxes present in some region files and not in others")
            if boxes is not None:
                boxes[row] = b
            feats[row] = f
    except BaseException:
        if tmp is not None and tmp.exists():
            tmp.unlink()
        raise
    if feats is None:
        feats = np.zeros((0, n_regions, 0), np.float32)
    if tmp is not None and isinstance(feats, np.memmap):
        feats.flush()
        if boxes is not None:
            atomic_write(cache.with_suffix(".boxes.npy"), lambda fh: np.save(fh, boxes))
        os.replace(tmp, cache)
        remove_stale_temps([cache])
        feats = np.load(cache, mmap_mode="r")
    return feats, boxes


def read_drilldown(
    root: str | Path,
    splits: Sequence[str] = ("train", "val", "test"),
    *,
    n_regions: int = 36,
    min_queries: int = 10,
    dedupe: bool = True,
    load_images: bool = False,
    features_cache_dir: str | Path | None = None,
    progress: bool = False,
) -> Corpus:
    """Read several Drill-down splits (see `read_drilldown_split`)."""
    out = {
        s: read_drilldown_split(
            root, s, n_regions=n_regions, min_queries=min_queries, dedupe=dedupe, load_images=load_images,
            features_cache=Path(features_cache_dir) / f"vg_{s}_regions.npy" if features_cache_dir else None,
            progress=progress,
        )
        for s in splits
    }  # fmt: skip
    check_disjoint(out)
    return Corpus(name="vg", splits=out, meta={"format": "drilldown"})


def write_drilldown(splits: Sequence[Split], root: str | Path, *, progress: bool = False) -> bool:
    """Write splits with region features and queries in the Drill-down layout (pixels as PNG when present).

    Image ids that are distinct integers are kept; otherwise images are numbered 1, 2, ... across the
    splits. Returns whether the ids were kept (if not, the caller keeps them elsewhere, e.g. a sidecar)."""
    root = Path(root)
    all_ids = [i for s in splits for i in s.image_ids]
    keep = all(i.isdigit() and str(int(i)) == i for i in all_ids) and len(set(all_ids)) == len(all_ids)
    number = 0
    for split in splits:
        if split.regions is None or split.queries is None:
            raise ValueError(
                f"{split.source}: split {split.name!r} needs region features and queries for Drill-down"
            )
        indices = []
        for row in tqdm(range(split.n_images), desc=f"write {split.name}", disable=not progress):
            number += 1
            index = int(split.image_ids[row]) if keep else number
            indices.append(str(index))
            h, w = split.images.shape[1:3] if split.images is not None else (0, 0)
            regions = [
                {"region_id": j + 1, "phrase": q, "x": 0, "y": 0, "width": int(w), "height": int(h)}
                for j, q in enumerate(split.queries[row])
            ]
            if any(not q or q != q.strip() for q in split.queries[row]):
                raise ValueError(
                    f"{split.source}: image {split.image_ids[row]!r}: a query cannot be written unchanged"
                )
            write_text(
                root / "vg" / "rg_jsons" / f"{index}.json",
                json.dumps({"image_id": index, "regions": regions}),
            )
            data = {"region_feats": np.asarray(split.regions[row], dtype=np.float32)}
            if split.region_boxes is not None:
                data["region_boxes"] = np.asarray(split.region_boxes[row], dtype=np.float32)
            write_file(region_file(root, index), lambda fh, d=data: pickle.dump(d, fh, protocol=2))
            if split.images is not None:
                write_png(root / "vg" / "VG_100K" / f"{index}.png", split.images[row])
        write_lines(root / "caches" / f"vg_{split.name}.txt", indices, "image index")
    return keep
