"""Sidecar files: the `Split` fields a real format has no place for, written beside it as one `.npz`.

The scenes export writes, next to each split in a real format, `xmr_<split>.npz` holding every field the
format cannot carry natively (exact relevance, caption levels, concept labels, classes, region boxes,
region queries, or ids the format spells differently). Every reader applies the sidecar when present, so
the scenes benchmark read through a reader has the same content as the generated corpus. Real data sets
have no sidecar and are read as they are.

Encoding (no pickles): string lists as numpy unicode arrays; `exact` (M, N) bool as `np.packbits` along
the gallery axis plus its shape; `queries` (N lists of strings) as one flat array plus (N + 1) offsets.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.data.formats.common import first_repeat, write_file

STRING_FIELDS = ("image_ids", "caption_ids", "captions", "class_names", "caption_level")
ARRAY_FIELDS = ("caption_image", "images", "regions", "region_boxes", "image_class", "image_labels")
SIDECAR_FIELDS: tuple[str, ...] = STRING_FIELDS + ARRAY_FIELDS + ("exact", "queries")
PER_IMAGE = ("image_ids", "images", "regions", "region_boxes", "image_class", "image_labels", "queries")
PER_CAPTION = ("caption_ids", "captions", "caption_image", "caption_level", "exact")


def sidecar_path(directory: str | Path, split: str) -> Path:
    return Path(directory) / f"xmr_{split}.npz"


def write_sidecar(
    directory: str | Path, split: Split, fields: list[str], name: str | None = None
) -> Path | None:
    """Write `fields` of `split` (those that are not None) to `xmr_<name>.npz`; None if nothing to write."""
    arrays: dict[str, np.ndarray] = {}
    for f in fields:
        if f not in SIDECAR_FIELDS:
            raise ValueError(f"sidecar cannot hold field {f!r}")
        value = getattr(split, f)
        if value is None:
            continue
        if f in STRING_FIELDS:
            arrays[f] = np.array(list(value), dtype=np.str_)
        elif f == "exact":
            exact = np.asarray(value, dtype=bool)
            arrays["exact_bits"] = np.packbits(exact, axis=1)
            arrays["exact_shape"] = np.array(exact.shape, dtype=np.int64)
        elif f == "queries":
            arrays["queries_flat"] = np.array([q for qs in value for q in qs], dtype=np.str_)
            arrays["queries_offsets"] = np.cumsum([0] + [len(qs) for qs in value], dtype=np.int64)
        else:
            arrays[f] = np.asarray(value)
    if not arrays:
        return None
    return write_file(sidecar_path(directory, name or split.name), lambda fh: np.savez(fh, **arrays))


@dataclass(frozen=True)
class _Rule:
    """What one stored array must be: its dtype kinds (numpy `dtype.kind`), number of axes and the size of
    its last axis (None: any). Its length is checked against the split (`PER_IMAGE`, `PER_CAPTION`)."""

    kinds: str
    ndim: int
    last: int | None = None


_KIND_NAMES = {"U": "text", "iu": "integers", "f": "float", "u": "uint8", "iub": "0/1 integers"}
RULES: dict[str, _Rule] = {
    "image_ids": _Rule("U", 1),
    "caption_ids": _Rule("U", 1),
    "captions": _Rule("U", 1),
    "class_names": _Rule("U", 1),
    "caption_level": _Rule("U", 1),
    "caption_image": _Rule("iu", 1),
    "images": _Rule("u", 4, 3),
    "regions": _Rule("f", 3),
    "region_boxes": _Rule("f", 3, 4),
    "image_class": _Rule("iu", 1),
    "image_labels": _Rule("iub", 2),
    "exact_bits": _Rule("u", 2),
    "exact_shape": _Rule("iu", 1),
    "queries_flat": _Rule("U", 1),
    "queries_offsets": _Rule("iu", 1),
}
PAIRS = (("exact_bits", "exact_shape"), ("queries_flat", "queries_offsets"))


def _check_arrays(path: Path, raw: dict[str, np.ndarray]) -> None:
    """The rules of the stored arrays on their own: known fields, paired fields together, dtype and axes."""
    for key in raw:
        if key not in RULES:
            raise DataFormatError(f"{path}: unknown sidecar field {key!r}")
    for a, b in PAIRS:
        if (a in raw) != (b in raw):
            have, missing = (a, b) if a in raw else (b, a)
            raise DataFormatError(f"{path}: {have} without {missing}")
    for key, value in raw.items():
        rule = RULES[key]
        if value.dtype.kind not in rule.kinds or (key == "images" and value.dtype != np.uint8):
            raise DataFormatError(
                f"{path}: field {key!r} of dtype {value.dtype}, expected {_KIND_NAMES[rule.kinds]}"
            )
        if value.ndim != rule.ndim or (rule.last is not None and value.shape[-1] != rule.last):
            axes = {"images": "(N, H, W, 3)", "region_boxes": "(N, R, 4)"}.get(key, f"{rule.ndim} axes")
            raise DataFormatError(f"{path}: field {key!r} of shape {value.shape}, expected {axes}")
    if "exact_bits" in raw:
        shape = raw["exact_shape"].tolist()
        if len(shape) != 2 or raw["exact_bits"].shape != (shape[0], -(-shape[1] // 8)):
            raise DataFormatError(
                f"{path}: exact_bits of shape {raw['exact_bits'].shape} for exact_shape {shape}"
            )
    if "queries_offsets" in raw:
        offsets, total = raw["queries_offsets"].tolist(), len(raw["queries_flat"])
        # image i's queries are flat[offsets[i]:offsets[i + 1]]: the offsets start at 0 and never fall
        bad = [i for i, o in enumerate(offsets) if (o != 0 if i == 0 else o < offsets[i - 1])]
        if bad or not offsets or offsets[-1] != total:
            i = bad[0] if bad else len(offsets) - 1
            raise DataFormatError(
                f"{path}: queries_offsets[{i}] = {offsets[i] if offsets else None}: "
                f"the offsets must rise from 0 to {total} (the queries)"
            )


def _check_split(path: Path, split: Split, fields: dict) -> None:
    """The rules against the split: one entry per image or caption, ids unique, values in range and finite."""
    n, m = split.n_images, split.n_captions
    for key, value in fields.items():
        expected = n if key in PER_IMAGE else m if key in PER_CAPTION else len(value)
        if len(value) != expected:
            per = "images" if key in PER_IMAGE else "captions"
            raise DataFormatError(f"{path}: field {key!r} has {len(value)} entries for {expected} {per}")
    for key in ("image_ids", "caption_ids"):
        repeat = first_repeat(fields.get(key, []))
        if repeat is not None:
            i, j = repeat
            raise DataFormatError(f"{path}: {key}[{i}] {fields[key][i]!r} repeats {key}[{j}]")
    if "exact" in fields and fields["exact"].shape[1] != n:
        raise DataFormatError(f"{path}: exact relevance of {fields['exact'].shape[1]} images for {n}")
    if "caption_image" in fields:
        bad = np.flatnonzero((fields["caption_image"] < 0) | (fields["caption_image"] >= n))
        if bad.size:
            raise DataFormatError(
                f"{path}: caption {split.caption_ids[bad[0]]!r}: caption_image {fields['caption_image'][bad[0]]} is not one of {n} images"
            )
    if "image_class" in fields:
        classes = len(split.class_names or [])
        bad = np.flatnonzero((fields["image_class"] < 0) | (fields["image_class"] >= classes))
        if bad.size:
            raise DataFormatError(
                f"{path}: image {split.image_ids[bad[0]]!r}: image_class {fields['image_class'][bad[0]]} is not one of the {classes} class_names"
            )
    if "image_labels" in fields:
        bad = np.flatnonzero(~np.isin(fields["image_labels"], (0, 1)).all(1))
        if bad.size:
            raise DataFormatError(f"{path}: image {split.image_ids[bad[0]]!r}: image_labels are not 0/1")
    for key in ("regions", "region_boxes"):
        if key in fields:
            ok = np.isfinite(fields[key].reshape(n, -1)).all(1)
            if not ok.all():
                bad = int(np.flatnonzero(~ok)[0])
                raise DataFormatError(f"{path}: image {split.image_ids[bad]!r}: {key} contain NaN or inf")


def read_sidecar(directory: str | Path, split: str) -> dict | None:
    """The decoded fields of `xmr_<split>.npz` (its arrays checked, `RULES`), or None when there is none."""
    path = sidecar_path(directory, split)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            raw = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataFormatError(f"{path}: unreadable sidecar ({e})") from None
    _check_arrays(path, raw)
    out: dict = {}
    for key, value in raw.items():
        if key in STRING_FIELDS:
            out[key] = [str(s) for s in value.tolist()]
        elif key in ARRAY_FIELDS:
            out[key] = value
        elif key == "exact_bits":
            m, n = (int(x) for x in raw["exact_shape"])
            out["exact"] = np.unpackbits(value, axis=1, count=n).astype(bool).reshape(m, n)
        elif key == "queries_offsets":
            flat = [str(s) for s in raw["queries_flat"].tolist()]
            out["queries"] = [flat[a:b] for a, b in zip(value[:-1].tolist(), value[1:].tolist())]
    return out


def apply_sidecar(split: Split, directory: str | Path, name: str | None = None) -> Split:
    """Set the fields found in `xmr_<name>.npz` on `split` and check them against it; return the split."""
    fields = read_sidecar(directory, name or split.name)
    if fields is None:
        return split
    path = sidecar_path(directory, name or split.name)
    for key, value in fields.items():
        setattr(split, key, value)
    if "image_ids" in fields:
        split.meta["image_ids_file"] = str(path)
    _check_split(path, split, fields)
    return split
