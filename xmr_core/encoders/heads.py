"""Embedding heads on top of `Features(local, mask, global_)`.

- `MultiHeadSelfAttention`: K-head structured self-attention over local features (Lin et al. 2017, as in
  PVSE's PIE-Net): a = softmax_L(w2 tanh(w1 z)), y^k = Σ_l a^k_l z_l.
- `SubEmbeddingHead`: K embeddings v^k = LN(h(z) + s(w att^k(z) z)) (PVSE's PIE-Net; PCME Sec. 3.1.1;
  DVSE Sec. III-B), each optionally L2-normalised -> (B, K, D); it also returns the local residuals
  s(w att^k(z) z) (B, K, D) that PVSE's diversity and DVSE's orthogonality losses use.
- `LocalAttentionHead`: the K = 1 case -> (B, D) (PCME's local attention branch of h^μ).
- `GaussianHead`: PCME Eq. (4) / Fig. 3: mean = local attention with sigmoid, LN and L2 (Fig. 3b);
  log-variance = global linear + attention branch without sigmoid, LN or L2 (Fig. 3c).

Gaussian parametrisation, used everywhere in xmr: a pair `(mu, logvar)`, both (B, D), diagonal covariance,
`logvar = log σ²` per dimension (so σ = exp(logvar / 2)).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.image import Features


class MultiHeadSelfAttention(nn.Module):
    """(B, L, C) + mask (B, L) -> pooled (B, K, C) and attention weights (B, L, K) (softmax over L)."""

    def __init__(self, in_dim: int, n_heads: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = hidden or max(in_dim // 2, 1)
        self.w1 = nn.Linear(in_dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, n_heads, bias=False)
        nn.init.xavier_uniform_(self.w1.weight)
        nn.init.xavier_uniform_(self.w2.weight)

    def forward(self, local: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        if not bool(mask.any(dim=1).all()):
            raise ValueError("attention over an item with no valid local feature (an all-False mask row)")
        logits = self.w2(torch.tanh(self.w1(local)))  # (B, L, K)
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        attn = logits.softmax(dim=1)
        return torch.einsum("blk,blc->bkc", attn, local), attn


class HeadOutput(NamedTuple):
    """emb (B, K, D) or (B, D); residual: the attention branch before the residual sum; attn (B, L, K)."""

    emb: Tensor
    residual: Tensor
    attn: Tensor


class SubEmbeddingHead(nn.Module):
    """K embeddings from global + attended local features: v^k = LN(g + s(w·att^k(z) z)), then L2."""

    def __init__(
        self,
        local_dim: int,
        embed_dim: int,
        n_embeds: int = 1,
        *,
        sigmoid: bool = True,
        layer_norm: bool = True,
        l2: bool = True,
        dropout: float = 0.0,
        attn_hidden: int | None = None,
    ) -> None:
        super().__init__()
        self.n_embeds = n_embeds
        self.attention = MultiHeadSelfAttention(local_dim, n_embeds, attn_hidden)
        self.fc = nn.Linear(local_dim, embed_dim)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)
        self.sigmoid = sigmoid
        self.norm = nn.LayerNorm(embed_dim) if layer_norm else nn.Identity()
        self.l2 = l2
        self.dropout = nn.Dropout(dropout)

    def forward(self, features: Features) -> HeadOutput:
        pooled, attn = self.attention(features.local, features.mask)  # (B, K, C)
        residual = self.fc(pooled)
        if self.sigmoid:
            residual = torch.sigmoid(residual)
        residual = self.dropout(residual)
        emb = self.norm(features.global_.unsqueeze(1) + residual)  # (B, K, D)
        if self.l2:
            emb = F.normalize(emb, dim=-1)
        return HeadOutput(emb, residual, attn)


class LocalAttentionHead(SubEmbeddingHead):
    """The single-embedding head: (B, D) (PCME's h^μ local attention branch; PVSE with K = 1)."""

    def __init__(self, local_dim: int, embed_dim: int, **kwargs: object) -> None:
        super().__init__(local_dim, embed_dim, 1, **kwargs)  # type: ignore[arg-type]

    def forward(self, features: Features) -> HeadOutput:
        out = super().forward(features)
        return HeadOutput(out.emb.squeeze(1), out.residual.squeeze(1), out.attn)


class GaussianHead(nn.Module):
    """Features -> (mu (B, D) L2-normalised, logvar (B, D) = log σ²) as in PCME Eq. (4) and Fig. 3."""

    def __init__(self, local_dim: int, global_dim: int, embed_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        if global_dim != embed_dim:
            raise ValueError(f"the residual needs global_dim == embed_dim, got {global_dim} and {embed_dim}")
        self.mean = LocalAttentionHead(local_dim, embed_dim, dropout=dropout)
        self.var_global = nn.Linear(global_dim, embed_dim)
        self.var_local = LocalAttentionHead(local_dim, embed_dim, sigmoid=False, layer_norm=False, l2=False)

    def forward(self, features: Features) -> tuple[Tensor, Tensor]:
        mu = self.mean(features).emb
        var_features = Features(features.local, features.mask, self.var_global(features.global_))
        logvar = self.var_local(var_features).emb
        return mu, logvar
