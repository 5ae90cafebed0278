"""Where cached token features of a frozen text encoder live, how they are stored, read back and looked up.

Apart from `xmr_core.encoders.text_features` (which runs the frozen MiniLM over the captions and imports
`encoders.text`) so that `encoders.text` can read a cache without importing the module that imports it, as
`trunk_cache` is for the image trunk.

A cache is one folder `cache_dir()/text_features/<key[:16]>/` holding N distinct captions (each a sequence of
vocabulary indices) and the last hidden states of every WordPiece token of each ([CLS] and [SEP] included), ragged:

    features.npy       float16 (T, H): the tokens of caption 0, then of caption 1, ...
    offsets.npy        int64 (N + 1,): caption n's tokens are rows offsets[n]:offsets[n + 1]
    words.npy          int32 (S,): the captions' vocabulary indices, concatenated
    word_offsets.npy   int64 (N + 1,): caption n's words are words[word_offsets[n]:word_offsets[n + 1]]
    meta.json          key, the encoder files' digest, the vocabulary's digest, H, N (written last: the marker)
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from xmr_core.config import cache_dir
from xmr_core.io import atomic_write, atomic_write_text

FILES = ("features.npy", "offsets.npy", "words.npy", "word_offsets.npy", "meta.json")  # meta.json last
FORMAT = 1


def features_dir(key: str) -> Path:
    return cache_dir() / "text_features" / key[:16]


def vocabulary_digest(words: Sequence[str]) -> str:
    """sha256 of a vocabulary's words in index order."""
    return hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()


def features_key(encoder_digest: str, vocab_digest: str, words: np.ndarray, word_offsets: np.ndarray) -> str:
    """The cache key: sha256 of the encoder's files, the vocabulary and the captions' word indices."""
    blob = hashlib.sha256()
    blob.update(json.dumps({"format": FORMAT, "encoder": encoder_digest, "vocab": vocab_digest}).encode())
    blob.update(np.ascontiguousarray(words, dtype=np.int32).tobytes())
    blob.update(np.ascontiguousarray(word_offsets, dtype=np.int64).tobytes())
    return blob.hexdigest()


@dataclass(frozen=True)
class TokenFeatures:
    """A loaded cache (`load_token_features`): `features` (T, H) float16 memory-mapped, `offsets` (N + 1,),
    `index` {caption's word indices: n}, and what `meta.json` says."""

    key: str
    folder: Path
    features: np.ndarray
    offsets: np.ndarray
    index: dict[tuple[int, ...], int]
    vocab_digest: str
    encoder_digest: str

    @property
    def hidden(self) -> int:
        return int(self.features.shape[1])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lookup(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Captions of a batch, `tokens` (B, L) vocabulary indices padded with 0 and `lengths` (B,), -> their
        cached token features (B, L', H) float32 (0 on padding) and mask (B, L') bool, on `tokens`' device.
        A caption not in the cache raises `KeyError` naming the cache folder."""
        ids, lens = tokens.cpu().numpy(), lengths.cpu().numpy()
        rows = np.empty(len(ids), dtype=np.int64)
        for b, (row, n) in enumerate(zip(ids, lens)):
            found = self.index.get(tuple(row[:n].tolist()))
            if found is None:
                raise KeyError(f"{self.folder}: caption {row[:n].tolist()} (vocabulary indices) is not in these "
                               "token features; a frozen feature cache reads captions as encoded, so train without "
                               "word dropout (the feature encoder's token_dropout drops tokens instead)")
            rows[b] = found
        starts, counts = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        width = int(counts.max())
        pos = np.arange(width)[None, :]
        mask = pos < counts[:, None]
        gathered = self.features[np.where(mask, starts[:, None] + pos, starts[:, None])]  # (B, L', H)
        local = torch.from_numpy(gathered.astype(np.float32)) * torch.from_numpy(mask)[..., None]
        return local.to(tokens.device), torch.from_numpy(mask).to(tokens.device)


def save_token_features(key: str, features: np.ndarray, offsets: np.ndarray, words: np.ndarray,
                        word_offsets: np.ndarray, meta: dict[str, object]) -> Path:
    """Write a cache folder atomically file by file, `meta.json` (the completion marker) last."""
    folder = features_dir(key)
    arrays = {"features.npy": features.astype(np.float16), "offsets.npy": offsets.astype(np.int64),
              "words.npy": words.astype(np.int32), "word_offsets.npy": word_offsets.astype(np.int64)}
    for name, arr in arrays.items():
        atomic_write(folder / name, lambda fh, a=arr: np.save(fh, a, allow_pickle=False))
    atomic_write_text(folder / "meta.json", json.dumps({"format": FORMAT, "key": key, "hidden": int(features.shape[1]),
                                                        "captions": len(offsets) - 1, **meta}, indent=1))
    return folder


def _offsets(path: Path, arr: np.ndarray, n: int, total: int) -> np.ndarray:
    """`arr` checked as (n + 1,) int offsets from 0 to `total`, non-decreasing; else a one-line error naming `path`."""
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) != n + 1:
        raise ValueError(f"{path}: expected ({n + 1},) integer offsets, got {arr.dtype} {arr.shape}")
    if arr[0] != 0 or arr[-1] != total or (np.diff(arr) < 0).any():
        raise ValueError(f"{path}: offsets must rise from 0 to {total}, got {arr[0]}..{arr[-1]}")
    return arr


def _finite(path: Path, features: np.ndarray, chunk: int = 1 << 16) -> None:
    for start in range(0, len(features), chunk):
        bad = ~np.isfinite(features[start:start + chunk]).all(1)
        if bad.any():
            raise ValueError(f"{path}: token row {start + int(np.flatnonzero(bad)[0])} contains NaN or inf")


@functools.lru_cache(maxsize=4)
def load_token_features(key: str) -> TokenFeatures:
    """The cache of `key`, checked: every file present, shapes and offsets consistent, no NaN or inf, the key in
    `meta.json` the one asked for. Anything wrong is a one-line error naming the file. Memoised per process
    (`load_token_features.cache_clear()` forgets)."""
    folder = features_dir(key)
    for name in FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name}: token features {key[:16]} are not in the cache (missing "
                                    "file); build them with xmr_core.encoders.text_features.token_features")
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        stored, hidden, n = meta["key"], int(meta["hidden"]), int(meta["captions"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{meta_path}: not a token-feature record ({type(err).__name__}: {err})") from None
    if stored != key or meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path}: holds key {str(stored)[:16]} (format {meta.get('format')}), asked for "
                         f"{key[:16]} (format {FORMAT})")

    def read(name: str, mmap: bool = False) -> np.ndarray:
        try:
            return np.load(folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise ValueError(f"{folder / name}: not a readable .npy array ({err})") from None

    features = read("features.npy", mmap=True)
    if features.ndim != 2 or features.shape[1] != hidden or features.dtype != np.float16:
        raise ValueError(f"{folder / 'features.npy'}: expected float16 (T, {hidden}), got {features.dtype} "
                         f"{features.shape}")
    offsets = _offsets(folder / "offsets.npy", read("offsets.npy"), n, len(features))
    words = read("words.npy")
    if words.ndim != 1 or words.dtype != np.int32:
        raise ValueError(f"{folder / 'words.npy'}: expected int32 (S,), got {words.dtype} {words.shape}")
    word_offsets = _offsets(folder / "word_offsets.npy", read("word_offsets.npy"), n, len(words))
    if features_key(meta["encoder"], meta["vocab"], words, word_offsets) != key:
        raise ValueError(f"{folder / 'words.npy'}: the captions stored do not give key {key[:16]}")
    _finite(folder / "features.npy", features)
    captions = np.split(words, word_offsets[1:-1])
    index = {tuple(c.tolist()): i for i, c in enumerate(captions)}
    return TokenFeatures(key, folder, features, offsets, index, meta["vocab"], meta["encoder"])
