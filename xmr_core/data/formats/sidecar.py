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
from pathlib import Path

import numpy as np

from xmr_core.data.corpus import DataFormatError, Split
from xmr_core.data.formats.common import write_file

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


def read_sidecar(directory: str | Path, split: str) -> dict | None:
    """The decoded fields of `xmr_<split>.npz`, or None when there is no sidecar."""
    path = sidecar_path(directory, split)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            raw = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataFormatError(f"{path}: unreadable sidecar ({e})") from None
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
        elif key not in ("exact_shape", "queries_flat"):
            raise DataFormatError(f"{path}: unknown sidecar field {key!r}")
    return out


def apply_sidecar(split: Split, directory: str | Path, name: str | None = None) -> Split:
    """Set the fields found in `xmr_<name>.npz` on `split` (checking their lengths); return the split."""
    fields = read_sidecar(directory, name or split.name)
    if fields is None:
        return split
    path = sidecar_path(directory, name or split.name)
    for key, value in fields.items():
        setattr(split, key, value)
    n, m = split.n_images, split.n_captions
    for key in fields:
        size = len(fields[key])
        expected = n if key in PER_IMAGE else m if key in PER_CAPTION else None
        if expected is not None and size != expected:
            per = "images" if key in PER_IMAGE else "captions"
            raise DataFormatError(f"{path}: field {key!r} has {size} entries for {expected} {per}")
    return split
