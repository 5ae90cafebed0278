"""DVSE: Dynamic Visual Semantic Sub-Embeddings and Fast Re-ranking (Wei et al., arXiv 2309.08154 / IEEE TMM
2025), Section III. No public code exists: this is a re-implementation from the paper's text.

Read top to bottom, this file follows the paper's Section III:

1. Sec. III-B "Embeddings Prediction": K image sub-embeddings by multi-head self-attention over the local
   features z_v (R, C): v̂^k = s(w¹ att^k_V(z_v) z_v), v^k = LN(h_V(z_v) + v̂^k), s = sigmoid, then L2
   (`xmr_core.encoders.heads.SubEmbeddingHead`, PVSE's PIE-Net); one caption embedding
   t = LN(h_T(z_t) + s(w³ att_T(z_t) z_t)) (`LocalAttentionHead`).
2. Eq. (3): the dynamic mask F_mask = round(s(h_V(w² z_v))), w² fixed (never trained).
3. Eq. (4): the dynamic orthogonal constraint loss L_dc = [Σ_i Σ_{j≠i} |F_mask(v̂^i)ᵀ F_mask(v̂^j)| − β]_+,
   and its undynamic form L_ort (Sec. IV-C, no mask).
4. Eq. (5)-(8): variance-aware weights σ_k = Std(mixed distribution) + 1, the mixed distribution being the
   similarities of v^k to every caption of the batch except its target (negatives and non-target positives).
5. Eq. (9)-(11): L_var = Σ_k Σ_i (1/σ_k² · hardest-negative hinge + log σ_k), both directions.
6. Eq. (12): L = η L_var + (1 − η) L_dc.
7. Test time: `score` = max over k of cos(v^k, t) (open choice 8); Fast Re-ranking (Eq. 13-15,
   `xmr_core.similarity.fast_rerank`) is applied to that matrix through `DVSE.reranker()`, the re-ranker
   `xmr_core.evaluate` takes (`rerank=`).

Table V's ablations are config fields: `dynamic_mask` (DM; off = L_ort instead of L_dc), `variance_weighting`
(L_var; off = σ_k ≡ 1), `orthogonal` (L_ort / L_dc term on or off), `sub_embeddings` (SE; off = K = 1);
`TABLE_V` lists the seven combinations and `dvse_ablation_config` builds one.

Choices the paper leaves open, made here once:
 1. The mask has one bit per sub-embedding: w² maps the C-dim local features to K values ("adaptively select
    image sub-embeddings", "the cardinality of the set can adaptively change"); h_V in Eq. (3) is the masked
    mean over the R local features; w² is a fixed random (Kaiming-uniform) projection, stored as a buffer.
 2. Where the mask acts: on the residuals v̂^k in Eq. (4), and (`mask_embeddings=True`) in the embeddings too,
    v^k = LN(h_V(z_v) + F_mask^k v̂^k), at training and test time; a masked sub-embedding falls back to the
    global feature. Without this Table V's combination 6 (DM without L_ort) would have no DM at all.
 3. Eq. (4) compares L2-normalised residuals (cosines, as PVSE's diversity loss), not raw sigmoid outputs
    (whose inner products are ~D/4 and could never come near β = 0.4); |·| is the absolute value.
 4. σ_k is per image and per sub-embedding (σ_ik) and is the sample (n − 1) standard deviation of the cosine
    similarities S(v_i^k, t_j), j ≠ i, over the batch (the text says "the sample standard deviation of the
    similarity distribution"; the softmax probabilities of Eq. 6 would give σ_k ≈ 1 always). The same σ_ik
    weights the t2i term of caption i (Eq. 11 attaches σ_k to the pair (v_i^k, t_i)).
 5. σ is a weight: it is detached (`detach_sigma=True`), so log σ_k adds a constant (kept, so the reported
    value is Eq. 11's); `detach_sigma=False` lets gradients through σ.
 6. The hinge of Eq. (10) uses the k-th sub-embeddings of the other images as negatives in the t2i direction
    (Eq. 11 as written) and masks other in-batch positives out of the negatives. Hardest negatives follow a
    `HingeSchedule`: `dvse_config(hard_negatives=True)` uses the from-scratch recipe of
    `xmr_core.methods.vse` (the single hardest negative collapses on scenes); `paper_hinge=True` is Eq. (10)'s
    single hardest negative.
 7. Reductions: L_var and L_dc are both summed over the batch (Eq. 11 sums over i; Eq. 4 is per image), so η
    balances them the same way at any batch size. With the orthogonal term off, L = L_var (η only balances two
    terms).
 8. Test-time score: the paper does not state how K sub-embeddings and one caption embedding give one score;
    we take the best sub-embedding, s(x, y) = max_k cos(v^k, t) (PVSE's MIL score, the set-based convention
    the paper compares with), `pool="mean"` averages instead. The training score is the same max.
 9. SE off (Table V combination 5, Table VI "w/o SE"): the same head with K = 1 (one attention branch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.heads import LocalAttentionHead, SubEmbeddingHead
from xmr_core.encoders.image import Features, ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.methods.vse import HingeSchedule, scratch_hard_negatives
from xmr_core.similarity import FastReranker, dot, max_pair_cosine


@dataclass
class DVSEConfig:
    """DVSE hyperparameters; defaults are the paper's COCO / Flickr30K values (Sec. IV-A-3)."""

    embed_dim: int = 256  # the paper: 1024 (COCO, Flickr30K), 512 (CUB)
    n_embeds: int = 6  # K; the paper: 6 (COCO, Flickr30K), 8 (CUB)
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    hinge: HingeSchedule = field(default_factory=lambda: HingeSchedule(margin=0.2, negatives="max"))  # α, Eq. (10)
    ort_margin: float = 0.4  # β of Eq. (4)
    eta: float = 0.6  # η of Eq. (12)
    # Table V switches
    dynamic_mask: bool = True  # DM: Eq. (3) in Eq. (4) (L_dc); off: L_ort
    variance_weighting: bool = True  # L_var's σ_k (Eq. 5-8); off: σ_k ≡ 1
    orthogonal: bool = True  # the L_dc / L_ort term of Eq. (12)
    sub_embeddings: bool = True  # SE; off: K = 1
    mask_embeddings: bool = True  # open choice 2: the mask also gates the residuals inside v^k
    detach_sigma: bool = True  # open choice 5
    pool: Literal["max", "mean"] = "max"  # open choice 8: test-time score over the K sub-embeddings
    # Fast Re-ranking, Eq. (15): (γ1, γ2) for image->text, (λ1, λ2) for text->image; CUB: (9, 8), (8, 17)
    fr_gamma: tuple[float, float] = (25.0, 25.0)
    fr_lambda: tuple[float, float] = (20.0, 20.0)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.n_embeds < 1:
            raise ValueError(f"DVSEConfig: n_embeds must be >= 1, got {self.n_embeds}")
        if not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"DVSEConfig: eta must be in [0, 1], got {self.eta}")
        if self.pool not in ("max", "mean"):
            raise ValueError(f"DVSEConfig: unknown pool {self.pool!r}; choose 'max' or 'mean'")

    @property
    def k(self) -> int:
        """The effective number of image sub-embeddings (1 with SE off)."""
        return self.n_embeds if self.sub_embeddings else 1


def dvse_config(n_embeds: int = 6, hard_negatives: bool = True, paper_hinge: bool = False,
                **overrides: object) -> DVSEConfig:
    """DVSE with K = `n_embeds` on the given encoders (`embed_dim`, `image`, `text` in `overrides`).

    `hard_negatives` uses the from-scratch hardest-negative recipe of `xmr_core.methods.vse` (as `pvse_config`);
    `paper_hinge` the single hardest negative of Eq. (10) from the start; neither: all negatives summed."""
    if paper_hinge:
        hinge = HingeSchedule(margin=0.2, negatives="max")
    elif hard_negatives:
        hinge = scratch_hard_negatives()
    else:
        hinge = HingeSchedule(margin=0.2, negatives="sum")
    return DVSEConfig(**{"n_embeds": n_embeds, "hinge": hinge, **overrides})  # type: ignore[arg-type]


# Table V: combination -> (DM, L_var, L_ort, SE)
TABLE_V: dict[int, tuple[bool, bool, bool, bool]] = {
    1: (True, True, True, True),
    2: (False, True, True, True),
    3: (False, False, True, True),
    4: (False, False, False, True),
    5: (False, False, False, False),
    6: (True, True, False, True),
    7: (True, False, True, True),
}


def dvse_ablation_config(combination: int, base: DVSEConfig) -> DVSEConfig:
    """`base` with the switches of Table V's `combination` (1 = full DVSE)."""
    if combination not in TABLE_V:
        raise ValueError(f"Table V has combinations 1-7, got {combination}")
    dm, var, ort, se = TABLE_V[combination]
    return replace(base, dynamic_mask=dm, variance_weighting=var, orthogonal=ort, sub_embeddings=se)


# ------------------------------------------------------------------------------ 2. the dynamic mask (Eq. 3)
class DynamicMask(nn.Module):
    """Eq. (3): F_mask = round(s(h_V(w² z_v))), w² a fixed (C -> K) projection. Features -> (B, K) in {0, 1}."""

    def __init__(self, local_dim: int, n_embeds: int) -> None:
        super().__init__()
        weight = torch.empty(n_embeds, local_dim)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))  # nn.Linear's default initialisation
        self.register_buffer("weight", weight)  # fixed: a buffer, not a parameter

    def forward(self, features: Features) -> Tensor:
        projected = features.local @ self.weight.T  # w² z_v: (B, R, K)
        weights = features.mask.to(projected.dtype).unsqueeze(-1)
        pooled = (projected * weights).sum(1) / weights.sum(1).clamp_min(1.0)  # h_V: masked mean over R
        return torch.round(torch.sigmoid(pooled))


# ------------------------------------------------------------------------------ 3. orthogonal losses (Eq. 4)
def orthogonal_loss(residuals: Tensor, margin: float, mask: Tensor | None = None) -> Tensor:
    """Eq. (4) per image: [Σ_i Σ_{j≠i} |F(v̂^i)ᵀ F(v̂^j)| − β]_+ on L2-normalised residuals, summed over images.

    residuals (B, K, D), mask (B, K) in {0, 1} (L_dc) or None (L_ort, Sec. IV-C) -> scalar."""
    r = F.normalize(residuals, dim=-1)
    if mask is not None:
        r = r * mask.unsqueeze(-1)
    gram = (r @ r.transpose(1, 2)).abs()  # (B, K, K)
    off_diagonal = gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(1)  # Σ_{i≠j}
    return (off_diagonal - margin).clamp_min(0).sum()


# ------------------------------------------------------------------------------ 4. variance-aware weights (Eq. 5-8)
def variance_weights(sims: Tensor) -> Tensor:
    """Eq. (8): σ_ik = Std_{j≠i}(S(v_i^k, t_j)) + 1, the sample std of the mixed distribution (the batch's
    captions other than the target: negatives and non-target positives). sims (K, B, B) with
    sims[k, i, j] = S(v_i^k, t_j), targets on the diagonal -> σ (K, B), each >= 1. A batch of fewer than 3
    pairs (a last short batch) has no sample std: σ ≡ 1 there."""
    k, b, _ = sims.shape
    if b < 3:
        return torch.ones(k, b, dtype=sims.dtype, device=sims.device)
    off = ~torch.eye(b, dtype=torch.bool, device=sims.device)
    others = sims[:, off].view(k, b, b - 1)
    return others.std(dim=-1, unbiased=True) + 1.0


# ------------------------------------------------------------------------------ the model
@register_method(DVSEConfig)
class DVSE(TwoTower):
    """emb images = (v (n, K, D) L2-normalised, gated residuals v̂ (n, K, D), mask (n, K));
    emb captions = t (n, D) L2-normalised; score = max_k cos(v^k, t) (or the mean over k)."""

    name = "dvse"

    def __init__(self, config: DVSEConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        k = config.k
        # 1. Sec. III-B: v^k = LN(h_V(z_v) + v̂^k), v̂^k = s(w¹ att^k z_v); t = LN(h_T + s(w³ att_T z_t))
        self.image_head = SubEmbeddingHead(self.image_encoder.local_dim, config.embed_dim, k, dropout=config.dropout)
        self.text_head = LocalAttentionHead(self.text_encoder.local_dim, config.embed_dim, dropout=config.dropout)
        self.dynamic_mask = DynamicMask(self.image_encoder.local_dim, k)  # 2. Eq. (3), fixed w²

    def attend(self, features: Features) -> tuple[Tensor, Tensor]:
        """The sub-embeddings before the mask, v̂^k = s(w¹ att^k(z_v) z_v) (B, K, D), and the attention weights
        att^k over the R local features (B, R, K)."""
        head = self.image_head
        pooled, attn = head.attention(features.local, features.mask)  # att^k(z_v) z_v: (B, K, C)
        return head.dropout(torch.sigmoid(head.fc(pooled))), attn

    def encode_images(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        features = self.image_encoder(batch)
        head = self.image_head
        residual, _ = self.attend(features)  # v̂^k: (B, K, D)
        if self.config.dynamic_mask:
            mask = self.dynamic_mask(features)  # (B, K)
        else:
            mask = torch.ones(residual.shape[:2], dtype=residual.dtype, device=residual.device)
        gated = residual * mask.unsqueeze(-1)  # F_mask(v̂^k)
        inner = gated if self.config.mask_embeddings else residual
        emb = F.normalize(head.norm(features.global_.unsqueeze(1) + inner), dim=-1)  # v^k = LN(h_V + v̂^k), L2
        return emb, gated, mask

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor:
        return self.text_head(self.text_encoder(batch)).emb

    def sub_similarities(self, img_emb: tuple[Tensor, Tensor, Tensor], cap_emb: Tensor) -> Tensor:
        """S(v_i^k, t_j) for a batch: (K, n_img, n_cap), differentiable (the training scores)."""
        return torch.einsum("ikd,jd->kij", img_emb[0], cap_emb)

    def batch_scores(self, img_emb: tuple[Tensor, Tensor, Tensor], cap_emb: Tensor) -> Tensor:
        """The sub-similarities pooled over k as `score` pools them: (B, B), differentiable."""
        sims = self.sub_similarities(img_emb, cap_emb)
        return sims.amax(0) if self.config.pool == "max" else sims.mean(0)

    def score(self, img_emb: tuple[Tensor, Tensor, Tensor], cap_emb: Tensor) -> Tensor:
        """Test-time score (open choice 8): max_k cos(v^k, t), chunked; `pool="mean"`: the mean over k."""
        v = img_emb[0]
        if self.config.pool == "max":
            return max_pair_cosine(v, cap_emb.unsqueeze(1))
        return dot(v.mean(1), cap_emb)  # mean_k v^k·t = (mean_k v^k)·t for unit t

    def reranker(self) -> FastReranker:
        """Fast Re-ranking (Eq. 13-15) with the config's (γ1, γ2) and (λ1, λ2), for `evaluate(..., rerank=)`."""
        return FastReranker(self.config.fr_gamma, self.config.fr_lambda)

    def loss(self, img_emb: tuple[Tensor, Tensor, Tensor], cap_emb: Tensor,
             batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        cfg = self.config
        _, residual, mask = img_emb
        sims = self.sub_similarities(img_emb, cap_emb)  # (K, B, B)
        k = sims.shape[0]
        # 4. Eq. (5)-(8): σ_ik >= 1 (≡ 1 with L_var off: Fig. 4(a)'s equal weights)
        if cfg.variance_weighting:
            sigma = variance_weights(sims)
            if cfg.detach_sigma:
                sigma = sigma.detach()
        else:
            sigma = torch.ones(k, sims.shape[1], dtype=sims.dtype, device=sims.device)
        # 5. Eq. (10)-(11): per sub-embedding k, hardest-negative hinges of image i (i2t) and caption i (t2i)
        l_var = sims.new_zeros(())
        for j in range(k):
            i2t, t2i = cfg.hinge.per_query(sims[j], batch, self.epoch)
            weighted = (i2t + t2i) / sigma[j].square()
            l_var = l_var + weighted.sum()
            if cfg.variance_weighting:
                l_var = l_var + 2.0 * sigma[j].log().sum()  # + log σ_k in each direction
        parts = {"var": l_var.item(), "sigma": sigma.mean().item(), "mask_kept": mask.mean().item(),
                 "max_weight": cfg.hinge.max_weight(self.epoch), "sim_std": sims.amax(0).std().item()}
        # 3. + 6. Eq. (4) and Eq. (12)
        if cfg.orthogonal:
            l_ort = orthogonal_loss(residual, cfg.ort_margin, mask if cfg.dynamic_mask else None)
            loss = cfg.eta * l_var + (1.0 - cfg.eta) * l_ort
            parts["dc" if cfg.dynamic_mask else "ort"] = l_ort.item()
        else:
            loss = l_var
        return loss, parts

    def backbone_parameters(self) -> list:
        return self.image_encoder.backbone_parameters() + self.text_encoder.backbone_parameters()
