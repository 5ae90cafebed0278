"""HREM: Hierarchical Relation Modeling (Fu et al., "Learning Semantic Relationship among Instances for
Image-Text Matching", CVPR 2023), Section 3.

Read top to bottom, this file follows the paper's Section 3:

1. Sec. 3.1: fragments. Region features (the BUTD analogue, `ImageEncoderConfig(kind="regions")`) through an
   FC layer to d: R (n_r, d); word features of the BiGRU over GloVe (`TextEncoderConfig`) or of the BERT-style
   MiniLM (`BertEncoderConfig`, the paper's BERT rows; or its frozen, cached token features,
   `FeatureTextEncoderConfig`) through an FC layer to d: C (n_c, d).
2. Sec. 3.2, Eq. (1)-(3): fragment-level relations. One self-attention layer with a feed-forward network over
   each sample's own fragments (R -> R^V, C -> C^U), then v = β MaxPool(R) + (1 - β) AvgPool(R^V) and
   u = β MaxPool(C) + (1 - β) AvgPool(C^U), L2-normalised. These are the embeddings retrieval uses.
3. Sec. 3.3.1, Eq. (4)-(11): the cross-embedding association graph of a training batch of N pairs, whose 2N
   nodes are [v_1 .. v_N, u_1 .. u_N]: the connection matrix A (Eq. 5-7: the τN nearest neighbours within a
   modality by embedding similarity, across modalities by the fragment matching p), the relevance matrix S
   (Eq. 10 within a modality; Eq. 8-9 across: an MLP over the top-K fragment matches q plus p) and the
   relevance regulariser L_reg (Eq. 11).
4. Sec. 3.3.2, Eq. (12), Fig. 4: attention restricted to A with the bias λS; the fusion mechanism (one
   self-attention over all 2N nodes) and the standalone mechanism (per modality: cross-attention with the
   inter-modal blocks, then self-attention with the intra-modal blocks), each followed by the feed-forward
   network, L layers -> the relation-enhanced embeddings v̄, ū.
5. Sec. 3.4, Eq. (13)-(14): the triplet loss on cosine similarities,
   L_cross = L(v̄, ū) + [L(v, u) + L(v̄, u) + L(v, ū)], plus w · L_reg; neighbour batch sampling: k-means on
   the image embeddings, batches of P clusters × K images (`ClusterBatchSampler`, through `fit`'s
   `train_batch_sampler` / `on_epoch_start` hooks).
6. Sec. 3.5: the instance-level module is used in training only. `encode_images` / `encode_captions` see one
   sample at a time, and `score` is the dot product of the (unit) base embeddings v, u.

Choices the paper leaves open, each stated once ("the code": CrossmodalGroup/HREM, read for
`shared/notes/official-code.md`, Sec. 4; where it differs from the paper the paper is the default):
 1. Fragments (Sec. 3.1). Regions: the region projector's linear layer is the FC to d (the code: FC plus a
    2-layer MLP with batch norm); other visual inputs (grid, pixels) get a linear layer from their local
    features to d. Words: a linear layer from the BiGRU outputs (2 · hidden) or from the BERT hidden states
    ([CLS] and [SEP] included, as the code).
 2. The attention layer of both levels is one post-norm Transformer block: Eq. (12)'s multi-head attention
    (Eq. 1 is the case A = the real fragments, S = 0), dropout, residual + LayerNorm, then a ReLU feed-forward
    network of width `feedforward` (the code: d), dropout, residual + LayerNorm (Sec. 3.3.2; the code's
    `nn.TransformerEncoderLayer`, 16 heads, dropout 0.1). `visual_fragment` / `textual_fragment` False
    (Table 3a) skip the layer: R^V = R.
 3. Eq. (2)'s MaxPool is the per-dimension max over the real fragments; the code takes the mean of the 2
    largest (`max_pool_k=2`). Both embeddings are L2-normalised (Eq. 13's s is the cosine; the code
    normalises), and the instance-level module reads the normalised ones (the code's `norm_input`).
 4. Eq. (7)-(8) match the initial fragments R, C (before the fragment attention, as the code's pre-pooling
    features), L2-normalised so that r^T c is a cosine as in SCAN [19], which the paper follows;
    `fragment_matching="scan"` is the code's variant (leaky ReLU 0.1, then L2 normalisation over the other
    modality's fragments, SCAN's attention normalisation). The fragments are detached for the graph
    (`detach_fragments`, as the code): the MLP of Eq. (9) learns from them, the encoders are not trained
    through the graph's matching.
 5. p averages over real fragments only; Eq. (8)'s TopK is over real fragments and, when a sample has fewer
    than K, the missing entries are 0 (the code reads 0 from padded words).
 6. τN is floor(τN), at least 1; ties go by `torch.topk`. A node is its own nearest intra-modal neighbour
    (the code: self-connections kept). The intra-modal ranking uses the cosine of the base embeddings.
 7. The MLP of Eq. (9) is Linear(K, K) - ReLU - Linear(K, 1), one per direction (the code).
 8. Eq. (10) prints S_T→T from the v's and S_I→I from the u's; read as S_I→I from v, S_T→T from u. Its
    squared distance is the default (`relevance_distance="squared"`); the code uses the distance
    ("euclidean"). σ = 1. S^g of Eq. (11) uses the same distance. Gradients flow through the intra-modal S
    into the embeddings (the code); A carries none.
 9. Eq. (11): L_kl(S, S^g) = KL(softmax(S) || softmax(S^g)), softmax over each row, S^g detached, averaged
    over the rows (the code's `batchmean`). The paper combines L_cross and L_reg with no weight
    (`reg_weight=1`); the code weights L_reg by 10. The reductions are the code's (the triplet terms summed over
    the positive pairs, L_reg averaged over the rows, each summed over its two directions), so `reg_weight=10`
    is the code's balance exactly (`docs/methods.md`).
10. Eq. (12): the same λS is added to every head's logits, d_k = d / heads, entries outside A get -inf. In
    the standalone mechanism each modality has its own branch (its own weights): the image branch attends
    from v to the u's with A_I→T, S_I→T, then among the v's with A_I→I, S_I→I; the text branch the other
    way. v̄, ū are L2-normalised (the code).
11. Eq. (13): the default is what Sec. 3.4 states and the code does, "We use the distance-weighted sampling
    [31] for hard negative mining" (`negatives="distance_weighted"`: cut-off 0.5, dimension 512, no loss
    beyond distance 1.7 on Flickr30K, 1.9 on COCO); `negatives="hardest"` is the VSE++ form [10] Eq. (13)
    cites (a `HingeSchedule`, so the from-scratch ramp of `xmr_core.methods.vse` applies; one measured
    epoch on scenes with the single hardest negative collapsed, positives 0.265 against negatives 0.263). Other in-batch
    positives (same image, or the same caption word for word) are never negatives.
12. "w/o L_cross" (Table 3b) drops L(v̄, u) and L(v, ū) and keeps L(v, u) (the code's `cross_loss=0`).
13. No warm-up of the instance-level module (the paper states none); the code starts it after 8000
    iterations: `relation_warmup_epochs`.
14. Neighbour batch sampling (the paper gives no numbers; the code has none): K = `images_per_cluster` (4)
    images from each of P = N / K clusters; k-means (k-means++ seeding, Lloyd iterations) on the unit image
    embeddings of the whole training split with ceil(n_images / `mean_cluster_size`) clusters, re-run at the
    start of every epoch from `neighbour_from_epoch` (0-based; "at the later training"), random batches
    before. One caption per image, drawn at random.
15. Ablations (Table 3) are fields: `visual_fragment`, `textual_fragment`; `intra`, `inter` (the blocks of A
    that are kept; both off: no instance-level module, L = L(v, u)); `connection=False` (A all ones),
    `relevance=False` (S = 0, no L_reg), `cross_loss=False`, `reg_weight=0`, `neighbour_sampling=False`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.data.corpus import Split
from xmr_core.data.datasets import image_loader
from xmr_core.data.samplers import ClusterBatchSampler
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, FeatureTextEncoderConfig, TextEncoderConfig
from xmr_core.losses import distance_weighted_triplet
from xmr_core.methods.base import in_batch_positives
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.methods.vse import HingeSchedule
from xmr_core.similarity import dot

Mechanism = Literal["fusion", "standalone"]
Negatives = Literal["hardest", "distance_weighted"]
KMEANS_ITERATIONS = 25
EMBED_BATCH = 256  # images per batch when the training split is embedded for k-means
LENGTH_GROUP = 32  # captions per group of similar length when captions are embedded at test time
LENGTH_STEP = 16  # a group's padded length is a multiple of this (of the CPU's float vectors: the same sums)


@dataclass
class HREMConfig:
    """HREM hyperparameters; defaults: the paper's (Sec. 4.1), the code's where the paper gives none."""

    embed_dim: int = 1024  # d
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig | BertEncoderConfig | FeatureTextEncoderConfig = field(default_factory=TextEncoderConfig)
    # Sec. 3.2, fragment level
    beta: float = 0.8  # β of Eq. (2)-(3)
    visual_fragment: bool = True  # region self-attention (Table 3a)
    textual_fragment: bool = True  # word self-attention (Table 3a)
    max_pool_k: int = 1  # Eq. (2)'s MaxPool: the max (1) or the code's mean of the k largest (2)
    heads: int = 16  # attention heads of both levels (the code)
    feedforward: int | None = None  # width of the feed-forward networks; None = embed_dim (the code)
    dropout: float = 0.1  # the code
    # Sec. 3.3, instance level
    mechanism: Mechanism = "fusion"
    layers: int = 1  # L
    tau: float = 0.5  # τ of Eq. (5)-(6)
    topk: int = 10  # K of Eq. (8)
    lam: float = 1.5  # λ of Eq. (12) (the code: 1.5 COCO, 1.0 Flickr30K)
    sigma: float = 1.0  # σ of Eq. (10)-(11)
    intra: bool = True  # intra-modal blocks of A, S (Table 3a)
    inter: bool = True  # inter-modal blocks of A, S (Table 3a)
    connection: bool = True  # False: A all ones ("w/o connection matrix", Table 3b)
    relevance: bool = True  # False: S = 0 and no L_reg ("w/o relevance matrix", Table 3b)
    relevance_distance: Literal["squared", "euclidean"] = "squared"  # Eq. (10): ||.||² (paper) or ||.|| (code)
    fragment_matching: Literal["cosine", "scan"] = "cosine"  # Eq. (7)-(8), open choice 4
    detach_fragments: bool = True  # the graph reads detached fragments (the code)
    relation_warmup_epochs: float = 0.0  # no instance-level module before this epoch (the code: 8000 steps)
    # Sec. 3.4, optimisation
    hinge: HingeSchedule = field(default_factory=lambda: HingeSchedule(margin=0.2, negatives="max"))  # α, Eq. (13)
    negatives: Negatives = "distance_weighted"  # Sec. 3.4 and the code; "hardest" = Eq. (13)'s VSE++ form
    dw_cut_off: float = 0.5  # distance-weighted sampling (the code)
    dw_dim: int = 512
    dw_nonzero_cutoff: float = 1.7  # the code: 1.7 Flickr30K, 1.9 COCO
    cross_loss: bool = True  # the bracketed consistency terms L(v̄, u) + L(v, ū) of Eq. (14)
    reg_weight: float = 1.0  # weight of L_reg (the code: 10)
    neighbour_sampling: bool = True
    neighbour_from_epoch: int = 15  # first epoch (0-based) with neighbour batches
    images_per_cluster: int = 4  # K of the sampler; P = batch_size / K
    mean_cluster_size: int = 64  # k-means clusters = ceil(n_images / mean_cluster_size)

    def __post_init__(self) -> None:
        checks = [
            (self.embed_dim >= 1 and self.heads >= 1 and self.embed_dim % self.heads == 0,
             f"embed_dim ({self.embed_dim}) must be a multiple of heads ({self.heads})"),
            (0.0 <= self.beta <= 1.0, f"beta must be in [0, 1], got {self.beta}"),
            (0.0 < self.tau <= 1.0, f"tau must be in (0, 1], got {self.tau}"),
            (min(self.topk, self.layers, self.max_pool_k, self.images_per_cluster, self.mean_cluster_size) >= 1,
             "topk, layers, max_pool_k, images_per_cluster and mean_cluster_size must be >= 1"),
            (self.sigma > 0 and self.reg_weight >= 0 and self.lam >= 0, "need sigma > 0, reg_weight >= 0, lam >= 0"),
            (self.mechanism in ("fusion", "standalone"), f"unknown mechanism {self.mechanism!r}"),
            (self.negatives in ("hardest", "distance_weighted"), f"unknown negatives {self.negatives!r}"),
            (self.relevance_distance in ("squared", "euclidean"),
             f"unknown relevance_distance {self.relevance_distance!r}"),
            (self.fragment_matching in ("cosine", "scan"), f"unknown fragment_matching {self.fragment_matching!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"HREMConfig: {message}")


def hrem_config(encoders: Mapping[str, object], **overrides: object) -> HREMConfig:
    """HREM on a chapter's encoders (`embed_dim`, `image`, `text`), the paper's defaults unless overridden."""
    return HREMConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


# ------------------------------------------------------------------- Eq. (1) and (12): the attention block
class RelationAttention(nn.Module):
    """Multi-head attention of Eq. (12): softmax over the keys that A allows of (Q Kᵀ / sqrt(d_k) + λ S), times V.
    Eq. (1) is the case A = every real key, S = 0."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def weights(self, query: Tensor, context: Tensor, connect: Tensor, relevance: Tensor | None = None,
                lam: float = 0.0) -> Tensor:
        """query (B, Lq, d), context (B, Lk, d), connect bool (B, Lq, Lk) (True: may attend), relevance
        (B, Lq, Lk) or None -> attention weights (B, heads, Lq, Lk), rows summing to 1 over A's keys."""
        if not bool(connect.any(-1).all()):
            raise ValueError("attention: a query has no key to attend (an all-zero row of the connection matrix)")
        b, lq, lk = connect.shape
        q = self.q(query).view(b, lq, self.heads, self.head_dim).transpose(1, 2)  # (B, h, Lq, d_k)
        k = self.k(context).view(b, lk, self.heads, self.head_dim).transpose(1, 2)  # (B, h, Lk, d_k)
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, h, Lq, Lk)
        if relevance is not None:
            logits = logits + lam * relevance.unsqueeze(1)
        return logits.masked_fill(~connect.unsqueeze(1), float("-inf")).softmax(-1)

    def forward(self, query: Tensor, context: Tensor, connect: Tensor, relevance: Tensor | None = None,
                lam: float = 0.0) -> Tensor:
        """-> (B, Lq, d): the heads' weighted values, concatenated and projected."""
        b, lk = context.shape[:2]
        values = self.v(context).view(b, lk, self.heads, self.head_dim).transpose(1, 2)  # (B, h, Lk, d_k)
        attended = self.dropout(self.weights(query, context, connect, relevance, lam)) @ values  # (B, h, Lq, d_k)
        return self.out(attended.transpose(1, 2).reshape(b, query.shape[1], -1))


class AttentionSublayer(nn.Module):
    """x -> LayerNorm(x + Dropout(Att(x, context; A, S))) (residual + layer normalisation, Sec. 3.3.2)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.attention = RelationAttention(dim, heads, dropout)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor, context: Tensor, connect: Tensor, relevance: Tensor | None = None,
                lam: float = 0.0) -> Tensor:
        return self.norm(x + self.dropout(self.attention(x, context, connect, relevance, lam)))


class FeedForward(nn.Module):
    """x -> LayerNorm(x + Dropout(W2 Dropout(ReLU(W1 x)))), the Transformer's feed-forward network."""

    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, dim),
                                 nn.Dropout(dropout))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.net(x))


# ------------------------------------------------------------------- Sec. 3.2: fragment level, Eq. (1)-(3)
def max_pool(x: Tensor, mask: Tensor, k: int = 1) -> Tensor:
    """Per dimension, the mean of the k largest values over the real fragments (k = 1: the max).
    x (B, L, d), mask (B, L) -> (B, d); an item with fewer than k real fragments averages all of them."""
    top = x.masked_fill(~mask.unsqueeze(-1), float("-inf")).topk(min(k, x.shape[1]), dim=1).values  # (B, k', d)
    n = mask.sum(1).clamp(max=top.shape[1])  # (B,)
    keep = torch.arange(top.shape[1], device=x.device)[None, :] < n[:, None]  # the first n are real
    return top.masked_fill(~keep.unsqueeze(-1), 0.0).sum(1) / n[:, None].to(x.dtype)


def avg_pool(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over the real fragments: x (B, L, d), mask (B, L) -> (B, d)."""
    weights = mask.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(1) / weights.sum(1)


class FragmentRelation(nn.Module):
    """Sec. 3.2: self-attention + feed-forward over one sample's fragments (F -> F'), then Eq. (2)/(3):
    β MaxPool(F) + (1 - β) AvgPool(F'), L2-normalised. fragments (B, L, d), mask (B, L) -> (B, d)."""

    def __init__(self, cfg: HREMConfig, attend: bool) -> None:
        super().__init__()
        self.beta, self.k = cfg.beta, cfg.max_pool_k
        self.attention = AttentionSublayer(cfg.embed_dim, cfg.heads, cfg.dropout) if attend else None
        self.ffn = FeedForward(cfg.embed_dim, cfg.feedforward or cfg.embed_dim, cfg.dropout) if attend else None

    def forward(self, fragments: Tensor, mask: Tensor) -> Tensor:
        enhanced = fragments
        if self.attention is not None and self.ffn is not None:
            keys = mask.unsqueeze(1).expand(-1, fragments.shape[1], -1)  # (B, L, L): every real fragment, Eq. (1)
            enhanced = self.ffn(self.attention(fragments, fragments, keys))
        pooled = self.beta * max_pool(fragments, mask, self.k) + (1.0 - self.beta) * avg_pool(enhanced, mask)
        return F.normalize(pooled, dim=-1)


class Fragments(NamedTuple):
    """One side of a training batch: emb (B, d) unit (v or u), the initial fragments (B, L, d) (R or C) and
    their mask (B, L) (True = real)."""

    emb: Tensor
    fragments: Tensor
    mask: Tensor


# ------------------------------------------------------------------- Sec. 3.3.1: the association graph
def nearest(similarity: Tensor, k: int) -> Tensor:
    """Eq. (5)-(6): (N, M) similarities -> (N, M) bool, True at the k most similar columns of each row."""
    out = torch.zeros_like(similarity, dtype=torch.bool)
    return out.scatter_(1, similarity.topk(min(k, similarity.shape[1]), dim=1).indices, True)


def _topk_or_zero(values: Tensor, mask: Tensor, k: int) -> Tensor:
    """The k largest real entries of the last axis, sorted, 0 where fewer than k are real: (..., L) -> (..., k)."""
    values = values.masked_fill(~mask, float("-inf"))
    if values.shape[-1] < k:
        values = F.pad(values, (0, k - values.shape[-1]), value=float("-inf"))
    top = values.topk(k, dim=-1).values
    return top.masked_fill(torch.isinf(top), 0.0)


class Matching(NamedTuple):
    """Eq. (7)-(8) for every image x caption of a batch. p_it (N_img, N_txt), p_ti (N_txt, N_img): the mean of
    each fragment's best match; q_it (N_img, N_txt, K), q_ti (N_txt, N_img, K): the K best matches."""

    p_it: Tensor
    p_ti: Tensor
    q_it: Tensor
    q_ti: Tensor


def fragment_matching(regions: Tensor, region_mask: Tensor, words: Tensor, word_mask: Tensor, k: int,
                      mode: Literal["cosine", "scan"] = "cosine") -> Matching:
    """Eq. (7)-(8): regions (N, n_r, d) + mask (N, n_r), words (M, n_c, d) + mask (M, n_c) -> `Matching`.

    sim[i, m, w] = r_m^T c_w of image i's region m and the batch's real word w (T of them, caption by caption),
    with unit fragments (a cosine). I->T: each region's best word within each caption, averaged over the regions
    (p) and its top K (q); T->I: each word's best real region of each image, likewise.
    mode "scan": leaky ReLU 0.1 (padded regions 0), then each region's column L2-normalised over each caption's
    words (for T->I) and each word's row over the regions (for I->T), as SCAN and HREM's code.
    Only real words enter the product (a caption's padding is most of its length); maxima are exact, so cosine
    equals the padded (N, M, n_r, n_c) computation bit for bit (scan: at float tolerance, each caption's norm
    sums in another order; `tests/test_hrem.py`).
    """
    n, n_r, _ = regions.shape
    m, n_c = word_mask.shape
    caption = torch.arange(m, device=words.device).repeat_interleave(word_mask.sum(1))  # (T,): each word's caption
    sim = (F.normalize(regions, dim=-1).flatten(0, 1) @ F.normalize(words[word_mask], dim=-1).T).view(n, n_r, -1)
    for_it, for_ti = sim, sim
    if mode == "scan":
        sim = F.leaky_relu(sim, 0.1).masked_fill(~region_mask[:, :, None], 0.0)
        norm = sim.new_zeros(n, n_r, m).index_add_(2, caption, sim.square()).sqrt()  # (N, n_r, M) per caption
        for_it, for_ti = F.normalize(sim, dim=1), sim / norm.clamp_min(1e-12).index_select(2, caption)
    per_region = sim.new_full((n, n_r, m), float("-inf")).scatter_reduce_(
        2, caption.expand_as(sim), for_it, "amax").transpose(1, 2)  # (N, M, n_r): each region's best word
    per_word = sim.new_full((n, m, n_c), float("-inf"))  # (N, M, n_c): each word's best region
    per_word[:, word_mask] = for_ti.masked_fill(~region_mask[:, :, None], float("-inf")).amax(1)
    r_mask = region_mask[:, None, :].expand_as(per_region)
    w_mask = word_mask[None, :, :].expand_as(per_word)
    p_it = per_region.masked_fill(~r_mask, 0.0).sum(-1) / r_mask.sum(-1)
    p_ti = (per_word.masked_fill(~w_mask, 0.0).sum(-1) / w_mask.sum(-1)).T
    return Matching(p_it, p_ti, _topk_or_zero(per_region, r_mask, k), _topk_or_zero(per_word, w_mask, k).transpose(0, 1))


def relevance_kernel(x: Tensor, y: Tensor, sigma: float, squared: bool = True) -> Tensor:
    """Eq. (10) / S^g of Eq. (11): exp(-||x_i - y_j||² / σ) ((N, d), (M, d) -> (N, M)); `squared` False: the
    distance itself (the code)."""
    sq = (x.square().sum(1)[:, None] + y.square().sum(1)[None, :] - 2.0 * x @ y.T).clamp_min(0.0)
    return torch.exp(-(sq if squared else (sq + 1e-12).sqrt()) / sigma)


def relevance_kl(relevance: Tensor, target: Tensor) -> Tensor:
    """Eq. (11)'s L_kl(S, S^g) = KL(softmax(S) || softmax(S^g)) per row, averaged over the rows; (N, M) each."""
    log_p, log_q = relevance.log_softmax(1), target.detach().log_softmax(1)
    return (log_p.exp() * (log_p - log_q)).sum(1).mean()


class AssociationGraph(NamedTuple):
    """Eq. (4): connection A (2N, 2N) bool and relevance S (2N, 2N) over [v_1..v_N, u_1..u_N] (blocks
    I->I, I->T / T->I, T->T), and L_reg (Eq. 11; 0 without the inter-modal relevance)."""

    connect: Tensor
    relevance: Tensor
    reg: Tensor

    def block(self, rows: Literal["I", "T"], cols: Literal["I", "T"]) -> tuple[Tensor, Tensor]:
        """(A, S) of one block, each (N, N): rows attend to cols."""
        n = len(self.connect) // 2
        r, c = (slice(0, n) if s == "I" else slice(n, 2 * n) for s in (rows, cols))
        return self.connect[r, c], self.relevance[r, c]


class InterRelevance(nn.Module):
    """Eq. (9): s = MLP(q) + p, one MLP Linear(K, K) - ReLU - Linear(K, 1) per direction."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.mlp_it, self.mlp_ti = (nn.Sequential(nn.Linear(k, k), nn.ReLU(), nn.Linear(k, 1)) for _ in range(2))

    def forward(self, m: Matching) -> tuple[Tensor, Tensor]:
        """-> S_I->T (N_img, N_txt), S_T->I (N_txt, N_img)."""
        return self.mlp_it(m.q_it).squeeze(-1) + m.p_it, self.mlp_ti(m.q_ti).squeeze(-1) + m.p_ti


# ------------------------------------------------------------------- Sec. 3.3.2: interaction mechanisms
class FusionLayer(nn.Module):
    """Fig. 4b: self-attention over all 2N nodes with the whole A, S (Eq. 12), then the feed-forward network."""

    def __init__(self, cfg: HREMConfig) -> None:
        super().__init__()
        self.attention = AttentionSublayer(cfg.embed_dim, cfg.heads, cfg.dropout)
        self.ffn = FeedForward(cfg.embed_dim, cfg.feedforward or cfg.embed_dim, cfg.dropout)

    def forward(self, v: Tensor, u: Tensor, graph: AssociationGraph, lam: float) -> tuple[Tensor, Tensor]:
        x = torch.cat([v, u]).unsqueeze(0)  # (1, 2N, d)
        x = self.ffn(self.attention(x, x, graph.connect.unsqueeze(0), graph.relevance.unsqueeze(0), lam))[0]
        return x[: len(v)], x[len(v):]


class StandaloneBranch(nn.Module):
    """Fig. 4a, one modality: cross-attention to the other modality with the inter-modal blocks, then
    self-attention with the intra-modal blocks (each only when that level is on), then the feed-forward network."""

    def __init__(self, cfg: HREMConfig) -> None:
        super().__init__()
        self.cross = AttentionSublayer(cfg.embed_dim, cfg.heads, cfg.dropout) if cfg.inter else None
        self.self_attention = AttentionSublayer(cfg.embed_dim, cfg.heads, cfg.dropout) if cfg.intra else None
        self.ffn = FeedForward(cfg.embed_dim, cfg.feedforward or cfg.embed_dim, cfg.dropout)

    def forward(self, x: Tensor, other: Tensor, inter: tuple[Tensor, Tensor], intra: tuple[Tensor, Tensor],
                lam: float) -> Tensor:
        """x (N, d) attends to other (M, d) with inter = (A, S) (N, M), then to itself with intra (N, N)."""
        h = x.unsqueeze(0)
        if self.cross is not None:
            h = self.cross(h, other.unsqueeze(0), inter[0].unsqueeze(0), inter[1].unsqueeze(0), lam)
        if self.self_attention is not None:
            h = self.self_attention(h, h, intra[0].unsqueeze(0), intra[1].unsqueeze(0), lam)
        return self.ffn(h)[0]


class StandaloneLayer(nn.Module):
    """Fig. 4a: an image branch and a text branch, each with its own weights."""

    def __init__(self, cfg: HREMConfig) -> None:
        super().__init__()
        self.image, self.text = StandaloneBranch(cfg), StandaloneBranch(cfg)

    def forward(self, v: Tensor, u: Tensor, graph: AssociationGraph, lam: float) -> tuple[Tensor, Tensor]:
        return (self.image(v, u, graph.block("I", "T"), graph.block("I", "I"), lam),
                self.text(u, v, graph.block("T", "I"), graph.block("T", "T"), lam))


# ------------------------------------------------------------------- Sec. 3.4: neighbour batch sampling
def kmeans(x: Tensor, n_clusters: int, generator: torch.Generator, iterations: int = KMEANS_ITERATIONS) -> Tensor:
    """k-means [30] with k-means++ seeding and Lloyd iterations: x (n, d) -> labels (n,) int64 in
    [0, n_clusters); a cluster left empty keeps its centre."""
    if not 1 <= n_clusters <= len(x):
        raise ValueError(f"kmeans: need 1 <= n_clusters <= {len(x)} points, got {n_clusters}")
    centres = x[torch.randint(len(x), (1,), generator=generator)]
    d2 = torch.cdist(x, centres).square()[:, 0]  # (n,) squared distance to the nearest centre so far
    for _ in range(n_clusters - 1):  # k-means++: the next centre with probability ∝ d2
        pick = torch.multinomial(d2, 1, generator=generator) if bool(d2.sum() > 0) else \
            torch.randint(len(x), (1,), generator=generator)
        centres = torch.cat([centres, x[pick]])
        d2 = torch.minimum(d2, torch.cdist(x, x[pick]).square()[:, 0])
    labels = torch.cdist(x, centres).argmin(1)
    for _ in range(iterations):
        counts = torch.bincount(labels, minlength=n_clusters).to(x.dtype)
        sums = torch.zeros_like(centres).index_add_(0, labels, x)
        centres = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1.0)[:, None], centres)
        new = torch.cdist(x, centres).argmin(1)
        if torch.equal(new, labels):
            break
        labels = new
    return labels


# ------------------------------------------------------------------- the model
@register_method(HREMConfig)
class HREM(TwoTower):
    """HREM. Test-time embeddings: v (n, d) and u (n, d), unit; `forward` (training) also returns the fragments
    (`Fragments`) that the association graph reads."""

    name = "hrem"

    def __init__(self, config: HREMConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        cfg, d = config, config.embed_dim
        # Sec. 3.1: the FC layers to d (regions: the region projector's own, open choice 1)
        self.image_fc = nn.Identity() if cfg.image.kind == "regions" else nn.Linear(self.image_encoder.local_dim, d)
        self.text_fc = nn.Linear(self.text_encoder.local_dim, d)
        # Sec. 3.2
        self.image_relation = FragmentRelation(cfg, cfg.visual_fragment)
        self.text_relation = FragmentRelation(cfg, cfg.textual_fragment)
        # Sec. 3.3 (training only)
        self.inter_relevance = InterRelevance(cfg.topk)
        layer = FusionLayer if cfg.mechanism == "fusion" else StandaloneLayer
        self.relation_layers = nn.ModuleList(layer(cfg) for _ in range(cfg.layers))
        self._batches: ClusterBatchSampler | None = None

    # Sec. 3.1-3.2: one sample at a time
    def image_fragments(self, batch: dict[str, Tensor]) -> Fragments:
        features = self.image_encoder(batch)
        regions = self.image_fc(features.local)  # R (B, n_r, d)
        return Fragments(self.image_relation(regions, features.mask), regions, features.mask)

    def caption_fragments(self, batch: dict[str, Tensor]) -> Fragments:
        features = self.text_encoder(batch)
        words = self.text_fc(features.local)  # C (B, n_c, d)
        return Fragments(self.text_relation(words, features.mask), words, features.mask)

    def encode_images(self, batch: dict[str, Tensor]) -> Tensor:
        """v (B, d), Eq. (2): no other sample is read."""
        return self.image_fragments(batch).emb

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor:
        """u (B, d), Eq. (3): no other sample is read. At test time on the CPU (no dropout) the text encoder reads
        the whole batch, then Eq. (3) runs on groups of captions of similar length, each cut to its longest caption
        rounded up to `LENGTH_STEP` words (padding is at the end): the word attention costs what the group's words
        cost, not the batch's longest caption's, and each caption's u is the same bit for bit (the CPU kernels'
        sums see the same lanes; `tests/test_hrem.py`)."""
        if self.training or self.text_fc.weight.device.type != "cpu":
            return self.caption_fragments(batch).emb
        features = self.text_encoder(batch)
        lengths = features.mask.sum(1)
        emb = features.local.new_empty(len(lengths), self.config.embed_dim)
        for group in lengths.argsort(stable=True).split(LENGTH_GROUP):
            width = min(features.mask.shape[1], LENGTH_STEP * math.ceil(int(lengths[group].max()) / LENGTH_STEP))
            words = self.text_fc(features.local[group, :width])  # C of the group (G, width, d)
            emb[group] = self.text_relation(words, features.mask[group, :width])
        return emb

    def forward(self, batch: dict[str, Tensor]) -> tuple[Fragments, Fragments]:
        """Training: both sides with their fragments, what `loss` needs for the association graph."""
        return self.image_fragments(batch), self.caption_fragments(batch)

    def score(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        """Sec. 3.5: the dot product of the unit base embeddings (a cosine), (n_img, n_cap)."""
        return dot(img_emb, cap_emb)

    def batch_scores(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        """(B, B) cosines with gradients, the training twin of `score`."""
        return img_emb @ cap_emb.T

    # Sec. 3.3.1
    def association_graph(self, img: Fragments, cap: Fragments) -> AssociationGraph:
        """A, S (Eq. 4-10) and L_reg (Eq. 11) of a batch of N pairs (the i-th image and caption match)."""
        cfg = self.config
        v, u = img.emb, cap.emb
        n = len(v)
        k = max(1, int(cfg.tau * n))  # τN
        ones = torch.ones(n, n, dtype=torch.bool, device=v.device)
        zeros = torch.zeros(n, n, device=v.device)
        squared = cfg.relevance_distance == "squared"
        with torch.no_grad():  # Eq. (5): the τN nearest neighbours within each modality
            a_ii, a_tt = (nearest(x @ x.T, k) if cfg.connection else ones for x in (v, u))
        s_ii, s_tt = (relevance_kernel(x, x, cfg.sigma, squared) if cfg.relevance else zeros for x in (v, u))
        a_it, a_ti, s_it, s_ti, reg = ones, ones, zeros, zeros, v.new_zeros(())
        if cfg.inter and (cfg.connection or cfg.relevance):
            regions, words = img.fragments, cap.fragments
            if cfg.detach_fragments:
                regions, words = regions.detach(), words.detach()
            matching = fragment_matching(regions, img.mask, words, cap.mask, cfg.topk, cfg.fragment_matching)
            if cfg.connection:  # Eq. (6)-(7): the τN best-matching samples of the other modality
                a_it, a_ti = nearest(matching.p_it.detach(), k), nearest(matching.p_ti.detach(), k)
            if cfg.relevance:  # Eq. (8)-(9), and L_reg (Eq. 11) against S^g (Eq. 10's kernel across modalities)
                s_it, s_ti = self.inter_relevance(matching)
                s_g = relevance_kernel(v, u, cfg.sigma, squared)
                reg = relevance_kl(s_it, s_g) + relevance_kl(s_ti, s_g.T)
        if not cfg.intra:
            a_ii, a_tt = ~ones, ~ones
        if not cfg.inter:
            a_it, a_ti = ~ones, ~ones
        connect = torch.cat([torch.cat([a_ii, a_it], 1), torch.cat([a_ti, a_tt], 1)])
        relevance = torch.cat([torch.cat([s_ii, s_it], 1), torch.cat([s_ti, s_tt], 1)])
        return AssociationGraph(connect, relevance, reg)

    # Sec. 3.3.2
    def enhance(self, v: Tensor, u: Tensor, graph: AssociationGraph) -> tuple[Tensor, Tensor]:
        """The L interaction layers: (v, u) (N, d) each -> unit (v̄, ū)."""
        for layer in self.relation_layers:
            v, u = layer(v, u, graph, self.config.lam)
        return F.normalize(v, dim=-1), F.normalize(u, dim=-1)

    # Sec. 3.4
    def triplet(self, img: Tensor, cap: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Eq. (13) on the (B, B) cosines of unit img, cap (B, d): hardest negatives (`hinge`) or
        distance-weighted ones."""
        scores = img @ cap.T
        cfg = self.config
        if cfg.negatives == "hardest":
            return cfg.hinge.loss(scores, batch, self.epoch)
        return distance_weighted_triplet(scores, cfg.hinge.margin, in_batch_positives(batch), cfg.dw_cut_off,
                                         cfg.dw_dim, cfg.dw_nonzero_cutoff)

    def relation_active(self) -> bool:
        """Whether the instance-level module trains now (some level on, warm-up over)."""
        return (self.config.intra or self.config.inter) and self.epoch >= self.config.relation_warmup_epochs

    def loss(self, img: Fragments, cap: Fragments, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Eq. (14) + w L_reg (Eq. 11): L(v̄, ū) + [L(v, u) + L(v̄, u) + L(v, ū)] + w L_reg; L(v, u) alone while the
        instance-level module is off."""
        v, u = img.emb, cap.emb
        initial = self.triplet(v, u, batch)
        scores = (v @ u.T).detach()
        off = ~torch.eye(len(v), dtype=torch.bool, device=v.device)
        logs = {"triplet_initial": initial.item(), "pos_sim": scores.diagonal().mean().item(),
                "neg_sim": scores[off].mean().item() if bool(off.any()) else float("nan")}
        if not self.relation_active():
            return initial, logs
        graph = self.association_graph(img, cap)
        v_bar, u_bar = self.enhance(v, u, graph)
        enhanced = self.triplet(v_bar, u_bar, batch)
        total = enhanced + initial
        logs["triplet_enhanced"] = enhanced.item()
        if self.config.cross_loss:
            cross = self.triplet(v_bar, u, batch) + self.triplet(v, u_bar, batch)
            total = total + cross
            logs["triplet_cross"] = cross.item()
        if self.config.relevance and self.config.inter:
            total = total + self.config.reg_weight * graph.reg
            logs["reg"] = graph.reg.item()
        return total, logs

    # Sec. 3.4: neighbour batch sampling, through fit's hooks
    def train_batch_sampler(self, split: Split, batch_size: int, seed: int) -> ClusterBatchSampler | None:
        """P × K neighbour batches (None with `neighbour_sampling` off: fit's random batches)."""
        cfg = self.config
        if not cfg.neighbour_sampling:
            return None
        if batch_size % cfg.images_per_cluster:
            raise ValueError(f"HREM: batch_size {batch_size} is not a multiple of images_per_cluster "
                             f"{cfg.images_per_cluster} (N = P × K)")
        self._batches = ClusterBatchSampler(split.caption_image, split.n_images, batch_size // cfg.images_per_cluster,
                                            cfg.images_per_cluster, seed)
        return self._batches

    def on_epoch_start(self, epoch: int, split: Split, device: torch.device) -> None:
        """From `neighbour_from_epoch` on, k-means of the current image embeddings of `split` gives the clusters
        of this epoch's batches."""
        if self._batches is None:
            return
        if epoch < self.config.neighbour_from_epoch:
            self._batches.set_clusters(None)
            return
        was_training = self.training
        self.eval()
        with torch.no_grad():
            v = torch.cat([self.encode_images({k: t.to(device) for k, t in batch.items()}).cpu()
                           for batch in image_loader(split, EMBED_BATCH, visual=self.visual)])
        self.train(was_training)
        n_clusters = math.ceil(split.n_images / self.config.mean_cluster_size)
        seed = int(np.random.default_rng([self._batches.seed, epoch]).integers(2**62))
        self._batches.set_clusters(kmeans(v, n_clusters, torch.Generator().manual_seed(seed)).numpy())
