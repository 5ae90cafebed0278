"""COCO `instances_*.json` -> multi-hot category labels per image: the concepts of PCME's plausible matches.

PMRP (PCME, Sec. 5.1) calls a retrieved item a plausible match when the COCO instance-category vectors of
the two images differ in at most ζ positions. Here each image gets a C-dim 0/1 vector (C = 80 for COCO,
categories in increasing id order); PCME's script indexes by raw category id (90 dims, 10 never used),
which gives the same L1 distances. An image with no annotation gets the zero vector, as in COCO.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xmr_core.data.corpus import DataFormatError
from xmr_core.data.formats.common import decode_utf8, require, write_text


def _load(path: Path) -> dict:
    path = require(path, "COCO instances annotations")
    try:
        data = json.loads(decode_utf8(path.read_bytes(), path))
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}: line {e.lineno}: invalid JSON ({e.msg})") from None
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise DataFormatError(f"{path}: no {key!r} list (not a COCO instances file)")
    return data


def read_coco_instances(paths: Sequence[str | Path]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Labels of every image in `paths` (ids as strings) -> (C,) uint8 multi-hot, and the C category names."""
    labels: dict[str, np.ndarray] = {}
    names: list[str] | None = None
    for path in map(Path, paths):
        data = _load(path)
        try:
            cats = sorted((int(c["id"]), str(c["name"])) for c in data["categories"])
            image_ids = [str(im["id"]) for im in data["images"]]
            ann = [(a.get("id"), str(a["image_id"]), int(a["category_id"])) for a in data["annotations"]]
        except (KeyError, TypeError, ValueError) as e:
            raise DataFormatError(f"{path}: malformed record ({type(e).__name__}: {e})") from None
        if names is None:
            names = [n for _, n in cats]
        elif names != [n for _, n in cats]:
            raise DataFormatError(f"{path}: categories differ from those of {paths[0]}")
        cat_index = {cid: i for i, (cid, _) in enumerate(cats)}
        rows = {}
        for im in image_ids:
            if im in labels or im in rows:
                raise DataFormatError(f"{path}: image {im} listed twice")
            rows[im] = len(rows)
        file_labels = np.zeros((len(rows), len(cats)), dtype=np.uint8)
        for ann_id, im, cid in ann:
            if cid not in cat_index:
                raise DataFormatError(f"{path}: annotation {ann_id}: unknown category id {cid}")
            if im not in rows:
                raise DataFormatError(f"{path}: annotation {ann_id}: image {im} is not in the file's images")
        if ann:
            r = np.fromiter((rows[im] for _, im, _ in ann), dtype=np.int64, count=len(ann))
            c = np.fromiter((cat_index[cid] for _, _, cid in ann), dtype=np.int64, count=len(ann))
            file_labels[r, c] = 1
        labels.update(zip(image_ids, file_labels))
    return labels, names or []


def coco_image_labels(paths: Sequence[str | Path], image_ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(N, C) uint8 labels of `image_ids` read from `paths`; an image absent from every file is an error."""
    labels, names = read_coco_instances(paths)
    missing = [i for i in image_ids if i not in labels]
    if missing:
        raise DataFormatError(
            f"{', '.join(map(str, paths))}: image {missing[0]} (and {len(missing) - 1} more) not found"
        )
    out = np.zeros((len(image_ids), len(names)), dtype=np.uint8)
    for row, im in enumerate(image_ids):
        out[row] = labels[im]
    return out, names


def write_coco_instances(
    path: str | Path, image_ids: Sequence[str], labels: np.ndarray, names: Sequence[str]
) -> Path:
    """Write 0/1 labels (N, C) as a minimal COCO instances file: one annotation per (image, category)."""
    labels = np.asarray(labels)
    if labels.shape != (len(image_ids), len(names)) or not np.isin(labels, (0, 1)).all():
        raise ValueError(
            f"{path}: labels must be 0/1 of shape ({len(image_ids)}, {len(names)}), got {labels.shape}"
        )
    rows, cols = np.nonzero(labels)
    data = {
        "images": [{"id": im, "file_name": f"{im}.png"} for im in image_ids],
        "annotations": [
            {"id": k + 1, "image_id": image_ids[r], "category_id": int(c) + 1, "iscrowd": 0}
            for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist()))
        ],
        "categories": [{"id": c + 1, "name": n, "supercategory": "concept"} for c, n in enumerate(names)],
    }
    return write_text(path, json.dumps(data))
