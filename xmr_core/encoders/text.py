"""Caption encoder: word vectors -> bidirectional GRU (PCME Sec. 3.1.1: z_t = GloVe words, t = BiGRU(z_t)).

The embedding table is initialised from the (V, d) word-vector array of `xmr_core.data.text`
(row 0 = `<pad>`, row 1 = `<unk>`) and is frozen or fine-tuned. Padded positions are skipped by packing.
Output, as for the image encoders, `Features(local, mask, global_)`: local = BiGRU outputs per word
(B, L, 2·hidden), mask (B, L) True on real words, global_ = linear(last forward ‖ first backward state) (B, D).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from xmr_core.encoders.image import Features


@dataclass
class TextEncoderConfig:
    """BiGRU sizes; `finetune_embeddings` False keeps the word vectors frozen."""

    hidden: int = 128
    num_layers: int = 1
    finetune_embeddings: bool = True


class BiGRUTextEncoder(nn.Module):
    """Batch dict (`tokens` (B, L) int64 padded with 0, `lengths` (B,)) -> `Features`."""

    def __init__(self, word_vectors: np.ndarray, embed_dim: int, config: TextEncoderConfig | None = None) -> None:
        super().__init__()
        config = config or TextEncoderConfig()
        vectors = np.asarray(word_vectors)
        if vectors.ndim != 2 or vectors.shape[0] < 2:
            raise ValueError(f"word vectors must be a (V, d) array with V >= 2, got shape {vectors.shape}")
        if not np.isfinite(vectors).all():
            bad = int(np.flatnonzero(~np.isfinite(vectors).all(1))[0])
            raise ValueError(f"word vectors: row {bad} contains NaN or inf")
        self.config = config
        self.embed = nn.Embedding.from_pretrained(  # a copy: fine-tuning must not write into the caller's array
            torch.tensor(vectors, dtype=torch.float32), freeze=not config.finetune_embeddings, padding_idx=0
        )
        self.rnn = nn.GRU(vectors.shape[1], config.hidden, num_layers=config.num_layers, batch_first=True,
                          bidirectional=True)
        self.fc = nn.Linear(2 * config.hidden, embed_dim)
        self.local_dim = 2 * config.hidden

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters frozen in PCME's first phase: the word embeddings (the pretrained part)."""
        return list(self.embed.parameters())

    def forward(self, batch: dict[str, Tensor]) -> Features:
        tokens, lengths = batch["tokens"], batch["lengths"]
        if tokens.ndim != 2 or lengths.shape != tokens.shape[:1]:
            raise ValueError(f"tokens must be (B, L) with lengths (B,), got {tuple(tokens.shape)}, {tuple(lengths.shape)}")
        if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > tokens.shape[1]):
            raise ValueError(f"caption lengths must lie in [1, {tokens.shape[1]}], got {lengths.tolist()}")
        words = self.embed(tokens)
        packed = pack_padded_sequence(words, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)
        local, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        # h_n: (num_layers·2, B, hidden); the last layer's forward and backward final states
        sentence = torch.cat([h_n[-2], h_n[-1]], dim=-1)
        mask = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
        return Features(local, mask, self.fc(sentence))
