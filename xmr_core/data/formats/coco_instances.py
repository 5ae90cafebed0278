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
from xmr_core.data.formats.common import (
    first_repeat,
    json_field,
    json_id,
    json_int,
    json_record,
    json_text,
    read_json,
    write_text,
)


def _checked(path: Path) -> tuple[list[tuple[int, str]], list[str], list[tuple[str, str, int]]]:
    """The file's format rules (docs/data.md): (categories as (id, name) in file order, image ids,
    annotations as (record name, image id, category id)); ids as written, never coerced."""
    data = read_json(path, "COCO instances annotations")
    if not isinstance(data, dict):
        raise DataFormatError(f"{path}: not a COCO instances file (a {type(data).__name__}, not a record)")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise DataFormatError(f"{path}: no {key!r} list (not a COCO instances file)")
    cats: list[tuple[int, str]] = []
    for i, c in enumerate(data["categories"]):
        where = f"{path}: categories[{i}]"
        c = json_record(c, where)
        cats.append(
            (
                json_int(json_field(c, "id", where), where, "id"),
                json_text(json_field(c, "name", where), where, "name"),
            )
        )
    for k, what in ((0, "id"), (1, "name")):
        repeat = first_repeat([c[k] for c in cats])
        if repeat is not None:
            i, j = repeat
            raise DataFormatError(f"{path}: categories[{i}]: {what} {cats[i][k]!r} repeats categories[{j}]")
    image_ids: dict[int | str, str] = {}  # as written (42 and "42" differ) -> id string
    listed: set[str] = set()
    for i, im in enumerate(data["images"]):
        where = f"{path}: images[{i}]"
        raw = json_field(json_record(im, where), "id", where)
        image_id = json_id(raw, where, "id")
        if image_id in listed:
            raise DataFormatError(f"{path}: image {image_id} listed twice")
        listed.add(image_id)
        image_ids[raw] = image_id
    ann = []
    cat_ids = {cid for cid, _ in cats}
    for i, a in enumerate(data["annotations"]):
        a = json_record(a, f"{path}: annotations[{i}]")
        where = f"{path}: annotation {a['id']}" if "id" in a else f"{path}: annotations[{i}]"
        raw = json_field(a, "image_id", where)
        json_id(raw, where, "image_id")
        cid = json_int(json_field(a, "category_id", where), where, "category_id")
        if cid not in cat_ids:
            raise DataFormatError(f"{where}: unknown category id {cid}")
        if raw not in image_ids:
            raise DataFormatError(f"{where}: image {raw!r} is not in the file's images")
        ann.append((where, image_ids[raw], cid))
    return cats, list(image_ids.values()), ann


def read_coco_instances(paths: Sequence[str | Path]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Labels of every image in `paths` (ids as strings) -> (C,) uint8 multi-hot, and the C category names."""
    labels: dict[str, np.ndarray] = {}
    names: list[str] | None = None
    for path in map(Path, paths):
        cats, image_ids, ann = _checked(path)
        cats = sorted(cats)
        if names is None:
            names = [n for _, n in cats]
        elif names != [n for _, n in cats]:
            raise DataFormatError(f"{path}: categories differ from those of {paths[0]}")
        cat_index = {cid: i for i, (cid, _) in enumerate(cats)}
        for im in image_ids:
            if im in labels:
                raise DataFormatError(f"{path}: image {im} listed twice")
        rows = {im: r for r, im in enumerate(image_ids)}
        file_labels = np.zeros((len(rows), len(cats)), dtype=np.uint8)
        for _, im, cid in ann:
            file_labels[rows[im], cat_index[cid]] = 1
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
