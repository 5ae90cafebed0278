"""What every reader and writer of the real formats shares: strict text, JSON fields, existence, pixels, finiteness.

Every failure is one `DataFormatError` line naming the file and the record (line number, image id);
nothing is skipped, padded, truncated or coerced here (an id of 42.0 is not the id 42, nor "42.0"). Writers write plain files (`write_file`): an export is made
atomic as a whole by `xmr_core.data.export`, which writes into a staging directory and renames it, so
tens of thousands of small files do not each pay an fsync.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from xmr_core.data.corpus import DataFormatError

if TYPE_CHECKING:
    from xmr_core.data.corpus import Split

DOCS = "docs/data.md"
IMAGE_SUFFIXES: tuple[str, ...] = (".jpg", ".jpeg", ".png")


def require(path: str | Path, what: str) -> Path:
    """`path` if it is a file, else a `DataFormatError` saying what it should hold and where the docs are."""
    path = Path(path)
    if not path.exists():
        raise DataFormatError(f"{path}: missing ({what}); see {DOCS}")
    if not path.is_file():
        raise DataFormatError(f"{path}: not a file ({what}); see {DOCS}")
    return path


def require_dir(path: str | Path, what: str) -> Path:
    """`path` if it is a directory, else a `DataFormatError` as `require`."""
    path = Path(path)
    if not path.exists():
        raise DataFormatError(f"{path}: missing ({what}); see {DOCS}")
    if not path.is_dir():
        raise DataFormatError(f"{path}: not a directory ({what}); see {DOCS}")
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


def read_json(path: str | Path, what: str) -> Any:
    """The parsed UTF-8 JSON file `path` (NaN and Infinity parse as floats: the field rules reject them)."""
    path = require(path, what)
    try:
        return json.loads(decode_utf8(path.read_bytes(), path))
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}: line {e.lineno}: invalid JSON ({e.msg})") from None


def json_record(value: Any, where: str) -> dict:
    """`value` if it is a JSON object; `where` is the error's prefix (file and record)."""
    if not isinstance(value, dict):
        raise DataFormatError(f"{where}: not a record")
    return value


def json_field(record: dict, key: str, where: str) -> Any:
    if key not in record:
        raise DataFormatError(f"{where}: no {key!r}")
    return record[key]


def json_int(value: Any, where: str, what: str) -> int:
    """An integer exactly: 6.9, 42.0, "42", true and NaN are errors, not 6, 42 or 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataFormatError(f"{where}: {what} {value!r} is not an integer")
    return value


def json_id(value: Any, where: str, what: str) -> str:
    """An id written as an integer or as text (non-empty, no surrounding space), as a string."""
    if isinstance(value, str) and value and value == value.strip():
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataFormatError(f"{where}: {what} {value!r} is not an integer or text")
    return str(value)


def json_text(value: Any, where: str, what: str) -> str:
    """Non-empty text, stripped."""
    if not isinstance(value, str):
        raise DataFormatError(f"{where}: {what} is not text")
    if not value.strip():
        raise DataFormatError(f"{where}: empty {what}")
    return value.strip()


def first_repeat(items: Sequence[Hashable]) -> tuple[int, int] | None:
    """(i, j) with items[i] the first item equal to an earlier one, items[j]; None if all differ."""
    first: dict[Hashable, int] = {}
    for i, item in enumerate(items):
        if item in first:
            return i, first[item]
        first[item] = i
    return None


def check_disjoint(splits: Mapping[str, Split]) -> None:
    """No image id in two splits. Only splits whose ids come from a file (`meta["image_ids_file"]`) count:
    the row numbers a format falls back on repeat in every split by design."""
    owner: dict[str, str] = {}
    for name, split in splits.items():
        source = split.meta.get("image_ids_file")
        if source is None:
            continue
        for row, image_id in enumerate(split.image_ids):
            if image_id in owner:
                raise DataFormatError(
                    f"{source}: image {image_id!r} (row {row}) of split {name!r} is also in split {owner[image_id]!r}"
                )
        owner.update(dict.fromkeys(split.image_ids, name))


def check_numeric(values: Any, path: str | Path, what: str) -> np.ndarray:
    """`values` as an array of numbers (int, uint or float); text, objects and booleans are errors."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        raise DataFormatError(f"{path}: {what} of dtype {array.dtype}, expected numbers")
    return array


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
