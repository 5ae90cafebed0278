"""Token features of a frozen BERT-style encoder (the packaged all-MiniLM-L6-v2), computed once per caption set.

`token_features(vocab, texts)` encodes every distinct caption of `texts` (as the vocabulary tokenises it) once
with the frozen encoder, exactly as a frozen `BertTextEncoder` would in a batch (`[CLS]` WordPieces of each
word `[SEP]`, its `wordpiece_ids`), and keeps the last hidden state of every token (384-d for MiniLM), [CLS]
and [SEP] included. The result is cached (`encoders.token_cache`), keyed by the digest of the encoder's files,
the vocabulary and the captions, and reused by every run and chapter that asks for the same captions; a
`FeatureTextEncoder` (`FeatureTextEncoderConfig(features=<key>)`) trains a text head on them.

This is the text side of what the book does for images (a frozen trunk's grid features): the papers fine-tune
BERT; on the `cpu` profile the MiniLM stays frozen (fine-tuning it costs about 15 minutes an epoch on 2 cores).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from xmr_core.config import one_thread
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.text import BertEncoderConfig, BertTextEncoder, FeatureTextEncoderConfig, minilm_path
from xmr_core.encoders.token_cache import (
    FILES,
    TokenFeatures,
    features_dir,
    features_key,
    load_token_features,
    save_token_features,
    vocabulary_digest,
)
from xmr_core.io import log_input

# What a run on cached features changes in a chapter's recipe: the cache holds each caption as written, so the data's
# word dropout is off (a dropped caption is not in the cache); `FeatureTextEncoderConfig.token_dropout` drops tokens
# of the features instead.
FEATURE_TRAIN_OVERRIDES: dict[str, object] = {"word_dropout": 0.0}


def feature_train_overrides(text: object) -> dict[str, object]:
    """What a chapter's recipe changes for a model with the text encoder config `text`: `FEATURE_TRAIN_OVERRIDES`
    for cached features (`FeatureTextEncoderConfig`), nothing for any other."""
    return dict(FEATURE_TRAIN_OVERRIDES) if isinstance(text, FeatureTextEncoderConfig) else {}


@functools.lru_cache(maxsize=4)
def encoder_digest(path: str = "") -> str:
    """sha256 over every file of a BERT model directory ("" = the packaged MiniLM): relative path and bytes."""
    root = Path(path) if path else minilm_path()
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{file.relative_to(root).as_posix()}\0".encode())
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def distinct_captions(vocab: Vocabulary, texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct vocabulary encodings of `texts`, sorted: (words int32 (S,) concatenated, word_offsets int64
    (N + 1,)). A text with no tokens raises `ValueError` naming it."""
    seqs = set()
    for text in texts:
        ids = tuple(vocab.encode(text))
        if not ids:
            raise ValueError(f"caption {text!r} has no tokens")
        seqs.add(ids)
    ordered = sorted(seqs)
    offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in ordered])
    return np.fromiter((w for s in ordered for w in s), dtype=np.int32, count=int(offsets[-1])), offsets


def encode_captions(words: np.ndarray, word_offsets: np.ndarray, encoder: BertTextEncoder, batch_size: int = 256,
                    progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Run the frozen `encoder`'s transformer over every caption (shortest first, in batches) on one torch thread
    (`config.one_thread`: the same features from one cache key on any machine, as for the trunk): features float16
    (T, H), the tokens of caption 0 then 1 ..., and offsets int64 (N + 1,)."""
    n = len(word_offsets) - 1
    lengths = np.diff(word_offsets)
    pieces = (encoder.pieces >= 0).sum(1).numpy()  # WordPieces per vocabulary word
    counts = np.add.reduceat(pieces[words], word_offsets[:-1]) + 2 if n else np.zeros(0, np.int64)  # + [CLS], [SEP]
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)
    features = np.empty((int(offsets[-1]), encoder.local_dim), dtype=np.float16)
    order = np.argsort(counts, kind="stable")
    encoder.eval()
    with one_thread(), torch.inference_mode():
        for start in tqdm(range(0, n, batch_size), desc="MiniLM token features", disable=not progress):
            rows = order[start:start + batch_size]
            tokens = torch.zeros(len(rows), int(lengths[rows].max()), dtype=torch.int64)
            for b, r in enumerate(rows):
                tokens[b, : lengths[r]] = torch.from_numpy(words[word_offsets[r]:word_offsets[r + 1]].astype(np.int64))
            ids, mask = encoder.wordpiece_ids(tokens, torch.from_numpy(lengths[rows]))
            local = encoder.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state.numpy()
            for b, r in enumerate(rows):
                features[offsets[r]:offsets[r + 1]] = local[b, : counts[r]]
    return features, offsets


def token_features(vocab: Vocabulary, texts: Iterable[str], path: str = "", progress: bool = True,
                   batch_size: int = 256) -> TokenFeatures:
    """The frozen encoder's (`path`, "" = the packaged MiniLM) token features of every distinct caption of `texts`:
    loaded from the cache when built before, else computed once (`encode_captions`) and cached."""
    words, word_offsets = distinct_captions(vocab, texts)
    vocab_digest = vocabulary_digest(vocab.words)
    digest = encoder_digest(path)
    key = features_key(digest, vocab_digest, words, word_offsets)
    if not (features_dir(key) / "meta.json").is_file():
        t0 = time.perf_counter()
        encoder = BertTextEncoder(np.array(vocab.words), 1, BertEncoderConfig(path=path, finetune=False))
        features, offsets = encode_captions(words, word_offsets, encoder, batch_size, progress)
        save_token_features(key, features, offsets, words, word_offsets,
                            {"encoder": digest, "vocab": vocab_digest, "encoder_path": str(path or "packaged MiniLM"),
                             "seconds": round(time.perf_counter() - t0, 2)})
    bank = load_token_features(key)
    log_input(bank.folder, list(FILES))
    return bank
