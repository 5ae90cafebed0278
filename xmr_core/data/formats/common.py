"""What every reader and writer of the real formats shares: strict text, existence, pixels and finiteness.

Every failure is one `DataFormatError` line naming the file and the record (line number, image id);
nothing is skipped, padded or truncated here. Writers write plain files (`write_file`): an export is made
atomic as a whole by `xmr_core.data.export`, which writes into a staging directory and renames it, so
tens of thousands of small files do not each pay an fsync.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import numpy as np
from PIL import Image
from tqdm import tqdm

from xmr_core.data.corpus import DataFormatError

DOCS = "docs/data.md"
IMAGE_SUFFIXES: tuple[str, ...] = (".jpg", ".jpeg", ".png")


def require(path: str | Path, what: str) -> Path:
    """`path` if it exists, else a `DataFormatError` saying what it should hold and where the docs are."""
    path = Path(path)
    if not path.exists():
        raise DataFormatError(f"{path}: missing ({what}); see {DOCS}")
    return path


def decode_utf8(data: bytes, path: str | Path) -> str:
    """Strict UTF-8 decode; the error names the line holding the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataFormatError(
            f"{path}: line {line}: not valid UTF-8 ({e.reason} at byte {e.start})"
        ) from None


def read_lines(path: str | Path, what: str, *, allow_empty: bool = False) -> list[str]:
    """The stripped lines of a UTF-8 text file (one final newline allowed); an empty line is an error."""
    path = require(path, what)
    text = decode_utf8(path.read_bytes(), path)
    text = text.removesuffix("\n")
    lines = [line.strip() for line in text.split("\n")] if text else []
    if not allow_empty:
        empty = [i for i, line in enumerate(lines) if not line]
        if empty:
            raise DataFormatError(f"{path}: line {empty[0] + 1}: empty {what} line")
    return lines


def write_file(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Create parent directories and call `write(fh)` on `path` opened for binary writing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        write(fh)
    return path


def write_text(path: str | Path, text: str) -> Path:
    return write_file(path, lambda fh: fh.write(text.encode("utf-8")))


def write_lines(path: str | Path, lines: Sequence[str], what: str) -> Path:
    """Write one record per line; a record that a line cannot hold exactly is a `ValueError`."""
    for i, line in enumerate(lines):
        if not line or line != line.strip() or "\n" in line or "\r" in line:
            raise ValueError(f"{path}: record {i} ({line!r}) cannot be written as one {what} line")
    return write_text(path, "".join(f"{line}\n" for line in lines))


def check_finite(features: np.ndarray, path: str | Path, image_ids: Sequence[str], chunk: int = 4096) -> None:
    """Raise naming the first image whose features hold NaN or inf (scanned in chunks: works on memmaps)."""
    for start in range(0, features.shape[0], chunk):
        block = np.asarray(features[start : start + chunk])
        ok = np.isfinite(block.reshape(block.shape[0], -1)).all(1)
        if not ok.all():
            row = start + int(np.flatnonzero(~ok)[0])
            raise DataFormatError(
                f"{path}: image {image_ids[row]!r} (row {row}): features contain NaN or inf"
            )


def find_image(stem: Path) -> Path | None:
    """The existing image file `stem` + one of `IMAGE_SUFFIXES`, or None."""
    for suffix in IMAGE_SUFFIXES:
        candidate = stem.with_name(stem.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def load_pixels(paths: Sequence[str], *, progress: bool = False) -> np.ndarray:
    """Decode image files to one (N, H, W, 3) uint8 array; every image must have the first one's size."""
    out: np.ndarray | None = None
    for i, p in enumerate(tqdm(paths, desc="decode images", disable=not progress)):
        try:
            with Image.open(p) as im:
                pixels = np.asarray(im.convert("RGB"))
        except (OSError, ValueError) as e:
            raise DataFormatError(f"{p}: cannot decode image ({e})") from None
        if out is None:
            out = np.empty((len(paths), *pixels.shape), dtype=np.uint8)
        if pixels.shape != out.shape[1:]:
            raise DataFormatError(
                f"{p}: image of size {pixels.shape}, expected {out.shape[1:]} like {paths[0]}"
            )
        out[i] = pixels
    return out if out is not None else np.zeros((0, 0, 0, 3), dtype=np.uint8)


def write_png(path: str | Path, pixels: np.ndarray) -> Path:
    """Write one (H, W, 3) uint8 image losslessly."""
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"{path}: pixels of shape {pixels.shape}, expected (H, W, 3)")
    image = Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8))
    return write_file(path, lambda fh: image.save(fh, format="PNG"))
