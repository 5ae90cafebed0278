"""SCAN / VSE precomputed-feature format (SCAN, VSE++, VSE∞, HREM).

Layout of one directory (`root`), for each split `<p>` (SCAN names: `train`, `dev`, `test`, `testall`):

- `<p>_ims.npy`   float (N, R, D) region features (BUTD: R = 36, D = 2048); (N, D) is read as R = 1;
- `<p>_caps.txt`  one caption per line, `k` per image in image order (caption j belongs to image j // k);
- `<p>_ids.txt`   optional image ids, one per image (or one per caption, constant over each image's k);
- `<p>_capids.txt` optional caption ids, one per caption (e.g. CxC's `testall_capids.txt`).

Without id files an image is named by its row and a caption by its line. The SCAN loaders' `im_div` rule
guesses k; here k is given (`captions_per_image`, 5 for COCO and Flickr30K) and any other count is an
error, as is a dev split truncated to 5000 captions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xmr_core.data.corpus import Corpus, DataFormatError, Split, check_finite
from xmr_core.data.formats.common import (
    check_disjoint,
    first_repeat,
    read_lines,
    require,
    write_file,
    write_lines,
)
from xmr_core.data.formats.sidecar import apply_sidecar

SPLIT_PREFIX: dict[str, str] = {"train": "train", "val": "dev", "test": "test"}
NATIVE_FIELDS: tuple[str, ...] = ("image_ids", "caption_ids", "captions", "caption_image", "regions")


def read_precomp_split(
    root: str | Path,
    split: str,
    prefix: str | None = None,
    *,
    captions_per_image: int = 5,
    n_regions: int | None = None,
    mmap: bool = True,
) -> Split:
    """Read one split; `prefix` defaults to `SPLIT_PREFIX[split]`. Regions are memory-mapped when `mmap`."""
    root = Path(root)
    prefix = prefix or SPLIT_PREFIX.get(split, split)
    regions, captions, image_ids, caption_ids, ids_path = _checked(
        root, prefix, split, captions_per_image, n_regions, mmap
    )
    out = Split(
        name=split,
        source=str(root / prefix),
        image_ids=image_ids or [str(i) for i in range(regions.shape[0])],
        caption_ids=caption_ids or [str(j) for j in range(len(captions))],
        captions=captions,
        caption_image=np.repeat(np.arange(regions.shape[0], dtype=np.int64), captions_per_image),
        regions=regions if regions.dtype == np.float32 else regions.astype(np.float32),
        meta={"format": "precomp", "prefix": prefix},
    )
    if image_ids:
        out.meta["image_ids_file"] = str(ids_path)
    return apply_sidecar(out, root, split).validate()


def _checked(
    root: Path, prefix: str, split: str, k: int, n_regions: int | None, mmap: bool
) -> tuple[np.ndarray, list[str], list[str] | None, list[str] | None, Path]:
    """The format rules of one split (docs/data.md), in order: (regions, captions, image ids or None,
    caption ids or None, path of the id file)."""
    ims_path = require(root / f"{prefix}_ims.npy", f"precomp region features of split {split!r}")
    try:
        regions = np.load(ims_path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataFormatError(f"{ims_path}: unreadable feature array ({e})") from None
    if regions.ndim == 2:
        regions = regions[:, None, :]
    if regions.ndim != 3:
        raise DataFormatError(f"{ims_path}: features of shape {regions.shape}, expected (N, R, D)")
    if n_regions is not None and regions.shape[1] != n_regions:
        raise DataFormatError(f"{ims_path}: {regions.shape[1]} regions per image, expected {n_regions}")
    if not np.issubdtype(regions.dtype, np.floating):
        raise DataFormatError(f"{ims_path}: features of dtype {regions.dtype}, expected float")
    n = regions.shape[0]
    if n == 0:
        raise DataFormatError(f"{ims_path}: no images in split {split!r}")

    caps_path = root / f"{prefix}_caps.txt"
    captions = read_lines(caps_path, f"caption of split {split!r}")
    m = len(captions)
    ids_path = root / f"{prefix}_ids.txt"
    image_ids = _image_ids(ids_path, n, k) if ids_path.exists() else None
    if m != k * n:
        if m < k * n:
            row = m // k
            name = image_ids[row] if image_ids else str(row)
            raise DataFormatError(
                f"{caps_path}: {m} captions for {n} images of {ims_path.name}: image {name!r} "
                f"(row {row}) has {m - row * k} of its {k} captions"
            )
        raise DataFormatError(f"{caps_path}: line {k * n + 1}: caption beyond {k} per image for {n} images")
    capids_path = root / f"{prefix}_capids.txt"
    caption_ids = read_lines(capids_path, "caption id") if capids_path.exists() else None
    if caption_ids is not None:
        if len(caption_ids) != m:
            raise DataFormatError(
                f"{capids_path}: {len(caption_ids)} caption ids for {m} captions in {caps_path.name}"
            )
        _no_repeat(capids_path, caption_ids, "caption id")
    check_finite(regions, ims_path, image_ids or [str(i) for i in range(n)])
    return regions, captions, image_ids, caption_ids, ids_path


def _image_ids(path: Path, n: int, k: int) -> list[str]:
    """Image ids from `<p>_ids.txt`: N distinct lines, or N·k lines constant over each image's captions."""
    ids = read_lines(path, "image id")
    step = 1
    if len(ids) == n * k and k > 1:
        grouped = np.array(ids, dtype=object).reshape(n, k)
        bad = np.flatnonzero((grouped != grouped[:, :1]).any(1))
        if bad.size:
            line = bad[0] * k + int(np.flatnonzero(grouped[bad[0]] != grouped[bad[0], 0])[0]) + 1
            raise DataFormatError(
                f"{path}: line {line}: ids of image row {bad[0]} differ across its captions"
            )
        ids, step = list(grouped[:, 0]), k
    elif len(ids) != n:
        raise DataFormatError(f"{path}: {len(ids)} image ids for {n} images")
    _no_repeat(path, ids, "image id", step)
    return ids


def _no_repeat(path: Path, ids: list[str], what: str, step: int = 1) -> None:
    """No id twice; `step` lines per id in the file (ids per caption)."""
    repeat = first_repeat(ids)
    if repeat is not None:
        i, j = repeat
        raise DataFormatError(f"{path}: line {i * step + 1}: {what} {ids[i]!r} repeats line {j * step + 1}")


def read_precomp(
    root: str | Path,
    splits: Sequence[str] = ("train", "val", "test"),
    *,
    prefixes: dict[str, str] | None = None,
    captions_per_image: int = 5,
    n_regions: int | None = None,
    mmap: bool = True,
    name: str = "precomp",
) -> Corpus:
    """Read several splits of one precomp directory; `prefixes` maps split names to file prefixes."""
    prefixes = {**SPLIT_PREFIX, **(prefixes or {})}
    out = {
        s: read_precomp_split(
            root, s, prefixes.get(s, s), captions_per_image=captions_per_image, n_regions=n_regions, mmap=mmap
        )
        for s in splits
    }
    check_disjoint(out)
    return Corpus(name=name, splits=out, meta={"format": "precomp", "root": str(root)})


def write_precomp_split(split: Split, root: str | Path, prefix: str | None = None) -> int:
    """Write `split` as precomp files; return k, its captions per image. Needs regions and k captions
    per image in image order (caption j of image j // k)."""
    root = Path(root)
    prefix = prefix or SPLIT_PREFIX.get(split.name, split.name)
    if split.regions is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no region features to write as precomp")
    n, m = split.n_images, split.n_captions
    k = m // n if n else 0
    if n == 0 or m != k * n or not np.array_equal(split.caption_image, np.repeat(np.arange(n), k)):
        raise ValueError(
            f"{split.source}: split {split.name!r}: precomp needs the same number of captions per image, in image order"
        )
    regions = np.ascontiguousarray(split.regions, dtype=np.float32)
    write_file(root / f"{prefix}_ims.npy", lambda fh: np.save(fh, regions, allow_pickle=False))
    write_lines(root / f"{prefix}_caps.txt", split.captions, "caption")
    write_lines(root / f"{prefix}_ids.txt", split.image_ids, "image id")
    write_lines(root / f"{prefix}_capids.txt", split.caption_ids, "caption id")
    return k
