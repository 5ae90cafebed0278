"""GPO / VSE∞ (Chen et al., "Learning the Best Pooling Strategy for Visual Semantic Embedding", CVPR 2021),
Sec. 3: the Generalized Pooling Operator over a sample's local features, the embedding-based baseline that
HREM's tables compare with ("GPO").

1. Local features. Region features (the BUTD analogue) through the region projector's FC layer to d; the
   BiGRU's (or BERT's) word features through a linear layer to d. φ = {φ_1, .., φ_N} (N, d) per sample.
2. GPO, Sec. 3.2 (their Eq. 3-5): for each dimension i, sort the N values φ_k^i in descending order,
   max_k(φ^i) = the k-th largest; the pooled feature is v^i = Σ_k θ_k · max_k(φ^i), with one weight θ_k per
   rank k shared by every dimension. The weights are generated for each sample from its number of features N:
   the positional encoding p_k (sine / cosine, `d_pe` dimensions) of each of the N indices goes through a
   bidirectional GRU (`d_hidden`); the two directions' outputs are averaged, a linear layer maps each to a
   score, and θ = softmax over the N real indices of score / `temperature` (their Eq. 5, temperature 0.1).
   Max pooling (θ = one-hot on k = 1), average pooling (θ = 1/N) and K-max pooling are special cases.
3. Loss: the VSE++ hinge [10] of `xmr_core.methods.vse` on the cosines of the L2-normalised pooled
   embeddings; the hardest-negative schedule is the library's from-scratch recipe (`scratch_hard_negatives`,
   as VSE++ here) unless a `HingeSchedule` is given (VSE∞'s code: summed negatives for one epoch, then the
   hardest: `paper_hard_negatives`).

Choices the paper leaves open, stated once (VSE∞'s public code, `woodfrog/vse_infty`, where it has one):
 1. The positional encoding is the Transformer's: p_k[2j] = sin(k / 10000^(2j/d_pe)), p_k[2j+1] = cos(...), over
    the indices k = 0..N-1 as the code numbers them; d_pe = d_hidden = 32 (the code).
 2. Padded features are excluded from the sort (they sort last) and from the softmax (their weight is 0).
 3. The region side has no residual MLP on top of the FC layer (the code adds a 2-layer MLP for BUTD input); the
    word side is a linear layer from the BiGRU's 2·hidden outputs to d (the code averages the two directions of a
    GRU of width d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, FeatureTextEncoderConfig, TextEncoderConfig
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.methods.vse import HingeSchedule, scratch_hard_negatives
from xmr_core.similarity import dot


@dataclass
class GPOConfig:
    """VSE∞ with GPO on both sides; defaults: VSE∞'s code (d_pe = d_hidden = 32, temperature 0.1, margin 0.2)."""

    embed_dim: int = 1024
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig | BertEncoderConfig | FeatureTextEncoderConfig = field(default_factory=TextEncoderConfig)
    d_pe: int = 32
    d_hidden: int = 32
    temperature: float = 0.1
    hinge: HingeSchedule = field(default_factory=scratch_hard_negatives)

    def __post_init__(self) -> None:
        if self.d_pe < 2 or self.d_pe % 2 or self.d_hidden < 1 or not self.temperature > 0:
            raise ValueError(f"GPOConfig: need an even d_pe >= 2, d_hidden >= 1 and temperature > 0, got "
                             f"{self.d_pe}, {self.d_hidden}, {self.temperature}")


def gpo_config(encoders: dict, **overrides: object) -> GPOConfig:
    """GPO on a chapter's encoders (`embed_dim`, `image`, `text`), VSE∞'s defaults unless overridden."""
    return GPOConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


def positional_encoding(n: int, dim: int) -> Tensor:
    """The sine / cosine encoding of indices k = 0..n-1: (n, dim), p_k[2j] = sin(k w_j), p_k[2j+1] = cos(k w_j),
    w_j = 10000^(-2j/dim) (open choice 1)."""
    k = torch.arange(n, dtype=torch.float32)[:, None]
    w = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)[None, :]
    pe = torch.empty(n, dim)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(k * w), torch.cos(k * w)
    return pe


def sorted_features(features: Tensor, mask: Tensor) -> Tensor:
    """Each dimension's values over the real features, in descending order, padding last as 0:
    features (B, N, d), mask (B, N) -> (B, N, d), [b, k, i] = the (k+1)-th largest φ^i of sample b."""
    filled = features.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    ranked = filled.sort(dim=1, descending=True).values
    return ranked.masked_fill(torch.isinf(ranked), 0.0)


class GPO(nn.Module):
    """The Generalized Pooling Operator: features (B, N, d) + mask (B, N) -> pooled (B, d) and the weights θ
    (B, N) (0 on padding, each row summing to 1)."""

    def __init__(self, d_pe: int = 32, d_hidden: int = 32, temperature: float = 0.1) -> None:
        super().__init__()
        self.d_pe, self.temperature = d_pe, temperature
        self.gru = nn.GRU(d_pe, d_hidden, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)

    def weights(self, mask: Tensor) -> Tensor:
        """θ (B, N) from each sample's number of real features (their Eq. 4-5)."""
        lengths = mask.sum(1)
        if not bool((lengths > 0).all()):
            raise ValueError("GPO: a sample has no real feature to pool")
        b, n = mask.shape
        pe = positional_encoding(n, self.d_pe).to(mask.device).expand(b, n, self.d_pe)
        packed = pack_padded_sequence(pe, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True, total_length=n)  # (B, N, 2 h)
        half = out.shape[-1] // 2
        scores = self.linear((out[..., :half] + out[..., half:]) / 2).squeeze(-1)  # (B, N)
        return (scores / self.temperature).masked_fill(~mask, float("-inf")).softmax(1)

    def forward(self, features: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        theta = self.weights(mask)
        return (sorted_features(features, mask) * theta.unsqueeze(-1)).sum(1), theta


@register_method(GPOConfig)
class GPOModel(TwoTower):
    """VSE∞: GPO over the projected regions and over the projected words, each L2-normalised: emb (n, d)."""

    name = "gpo"

    def __init__(self, config: GPOConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        d = config.embed_dim
        self.image_fc = nn.Identity() if config.image.kind == "regions" else nn.Linear(self.image_encoder.local_dim, d)
        self.text_fc = nn.Linear(self.text_encoder.local_dim, d)
        self.image_pool = GPO(config.d_pe, config.d_hidden, config.temperature)
        self.text_pool = GPO(config.d_pe, config.d_hidden, config.temperature)

    def encode_images(self, batch: dict[str, Tensor]) -> Tensor:
        features = self.image_encoder(batch)
        return F.normalize(self.image_pool(self.image_fc(features.local), features.mask)[0], dim=-1)

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor:
        features = self.text_encoder(batch)
        return F.normalize(self.text_pool(self.text_fc(features.local), features.mask)[0], dim=-1)

    def score(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        """The dot product of the unit embeddings (a cosine), (n_img, n_cap)."""
        return dot(img_emb, cap_emb)

    def batch_scores(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        return img_emb @ cap_emb.T

    def loss(self, img_emb: Tensor, cap_emb: Tensor, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        scores = self.batch_scores(img_emb, cap_emb)
        loss = self.config.hinge.loss(scores, batch, self.epoch)
        off = ~torch.eye(len(scores), dtype=torch.bool, device=scores.device)
        return loss, {"hinge": loss.item(), "pos_sim": scores.diagonal().mean().item(),
                      "neg_sim": scores[off].mean().item() if bool(off.any()) else float("nan")}
