"""HMRN: Hierarchical Matching and Reasoning Network for multi-query image retrieval (Ji et al., "Hierarchical
Matching and Reasoning for Multi-Query Image Retrieval", Neural Networks 2024), Section 3.

Multi-query retrieval: the query is a set of N region-specific text queries ("rounds"), the gallery is the
images. HMRN scores an (image, query set) pair by cross attention between the image's regions and the set's
queries, so nothing is embedded once per side: `score` takes the regions of a block of images and a block of
query sets and returns the (n_img, n_sets) block, every pair at once (no loop over images); a gallery is
scored block by block (`xmr_core.evaluate.multi_query_scores`). Read top to bottom, this file follows Sec. 3:

1. Sec. 3.1, Eq. (1)-(2): regions through a linear layer to D, v_i (K, D); each query through a BiGRU whose
   forward and backward states are averaged (Eq. 2), t_j = h_M, the last word's (N, D).
2. Sec. 3.2.1, Eq. (3)-(8): local-level matching on the clipped cosines [s(v_i, t_j)]_+ (choice 11). Image-Text (I-T):
   each region attends over the queries (softmax with λ1), averaged over the regions (S_I-T). Text-Image
   (T-I): each query attends over the regions (softmax with λ2), averaged over the queries (S_T-I).
3. Sec. 3.2.2, Eq. (9)-(11): global-level matching: self-attention pooling of the regions (and, with its own
   weights, of the queries) guided by their mean, L2-normalised; S_G = v_glo^T t_glo.
4. Sec. 3.3.1, Eq. (12)-(14): intra-correlation. Each query attends over the regions (λ2, on [s]_+ normalised
   over the queries) to get its projected region v_j^p; the N + 1 intra-correlation vectors are
   C = norm(W_c |V - T|²) of V = [v_1^p .. v_N^p, v_glo] and T = [t_1 .. t_N, t_glo].
5. Sec. 3.3.2, Eq. (15)-(16): inter-correlation reasoning: L steps of graph attention over the N + 1 nodes,
   A = softmax over the source nodes q of (W_q C_q)^T (W_k C_k), C^{l+1} = ReLU(W_R Σ_q A C_q); the global
   node's final vector through a fully-connected layer gives the reasoning similarity S_R (choice 4).
6. Sec. 3.4, Eq. (17)-(19): S_1 = α S_I-T + β S_R + (1 - α - β) S_G (`local="I-T"`), S_2 the same with
   S_T-I (`local="T-I"`); two models trained separately, their ensemble S_1 + S_2 (`HMRNEnsemble`).
7. Sec. 3.5, Eq. (20)-(21): the symmetric InfoNCE with temperature (scale) τ on each level,
   L = α L_SL + β L_SR + (1 - α - β) L_SG.

Choices the paper leaves open, each stated once ("the code": LZH-053/HMRN, read for
`shared/notes/official-code.md`, Sec. 5; where it differs from the paper the paper is the default):
 1. Embeddings. The region embeddings v_i (Eq. 1; other visual inputs, grid or pixels, get a linear layer from
    their local features) and the query embeddings t_j are L2-normalised once, as in the code and in SGRAF
    [31] which the VR module follows, so the cosines of Eq. (3)-(8) are dot products and Eq. (14) compares
    vectors of one scale; padded regions and absent queries are zero vectors and are masked out of every
    softmax and mean. t_j = h_M as printed (and as the code): the backward half of h_M has read only the last
    word, one step from the zero initial state, so the backward GRU's recurrent weights W_hh never get a
    gradient. With a BiGRU whose hidden size differs from D, a linear layer maps h_M to D (the paper: hidden =
    D = 256, no layer). The word embeddings start from the given word vectors (GloVe, the book's strong start)
    and are fine-tuned (`TextEncoderConfig.finetune_embeddings`); the paper learns them, the code from random
    ones. With the BERT-style text encoder (`BertEncoderConfig`, Table 10's pretrained backbone, or its frozen
    cached token features, `FeatureTextEncoderConfig`) t_j is its pooled, projected sentence vector.
 2. The λ of each softmax. The I-T model uses λ1 in Eq. (4), the T-I model λ2 in Eq. (7), and both use λ2 in
    Eq. (12) as printed. Eq. (12)'s normalisation is the L2 norm of [s(t_j, v_i)]_+ over the set's queries,
    with 1e-8 added against a region that matches no query (then its weights are uniform).
 3. The paper's W matrices (Eq. 9, 14, 15, 16) are linear maps without bias, as printed (the code adds biases,
    and Tanh, batch norm and dropout in the pooling of Eq. 9); the reasoning FC layer has a bias. The global
    pooling of the queries has its own weights. Each reasoning step has its own W_q, W_k, W_R (SGRAF [31]).
 4. Eq. (15) normalises over the source nodes q and Eq. (16) updates node k by Σ_q A(C_q, C_k) C_q, as
    printed; only the set's real queries and the global node are nodes. S_R = sigmoid(w^T c*_glo + b), the
    code's form, by default; the paper prints ReLU (`reasoning_activation="relu"`). Reason: the global nodes
    c*_glo of all pairs are alike at initialisation (non-negative, from the same weights), so w^T c*_glo + b
    has one sign for nearly every pair, and with ReLU about half of the initialisations start with S_R = 0
    everywhere and no gradient into the VR module (measured: a tiny HMRN T-I, seed 0, trained two epochs
    with L_SR stuck at exactly 2 log B).
 5. Eq. (20) is used as printed: the sum of the two directions' log-softmax terms over the batch, i.e. twice
    `losses.info_nce` (which averages the two), with τ multiplying the scores (τ = 40). Images repeated in a
    batch are not each other's negatives. Eq. (21) weights the levels with the α, β of Eq. (18)-(19).
 6. α = β = 0.4 (Sec. 4.5.3, "the best R@Sum is achieved when α and β are both set to 0.4"); the code uses
    α = 0.6, β = 0.3. Table 6's single levels and pairs are weight settings (e.g. α = 1, β = 0: local only);
    a level with weight 0 is not computed.
 7. Training sets (Sec. 4.2, "queries and their orders are randomly sampled during training"): each epoch
    every training image once, with a random `max_queries` (N = 10) of its region queries in random order
    (all of them when it has fewer); the loss scores the whole set. The code also averages the local-level
    loss over the prefixes 1..t of the set; this file follows Eq. (21). A set longer than `max_queries` given
    to `encode_queries` is an error naming its image: nothing is dropped silently.
 8. Test time: no round weighting (the code multiplies S_R by (1 + .. + t) / 55 at test time only) and no
    query is dropped (the code's evaluation drops the last 96 query sets). Round r scores the set of the
    first r queries of each image, in stored order.
 9. Table 7's "Concat" mode (`intra_mode="concat"`): C = norm(W_c [V ; T]) with W_c (D, 2D).
10. Table 9's "Joint" training (`local="joint"`), which the paper describes only as optimising "the symmetric cross
    attention mechanism simultaneously ... trading precision for computational efficiency": one network whose
    score is S_1 + S_2 (Eq. 17) with both local similarities (I-T with λ1, T-I with λ2) and one shared set of
    encoders, global pooling and reasoning module, trained on the sum of the two models' losses (Eq. 21 each:
    α L_I-T + α L_T-I + 2β L_SR + 2(1 - α - β) L_SG). "Split" is the ensemble of two separately trained models.
11. The clip [s(v_i, t_j)]_+ of Eq. (3)-(8) and (12): the code's LeakyReLU(0.1) (`compute_pairwise_similarity`,
    `SCAN_attention`; SCAN's code does the same) by default; the paper prints max(s, 0) (`clip="relu"`). Reason:
    with max(s, 0), once every region-query cosine of a batch is negative every local score is exactly 0 and
    nothing gets a gradient again (a dead ReLU), and the start is close to that state: the regions share a
    common direction and so do the queries, so their cosines share a sign (measured: the cpu profile's scenes
    `multi` split and encoders, Table 6's S_T-I (α = 1, β = 0), τ 80, lr 2e-3, batch 32, seed 0: 29% of the
    cosines positive at initialisation, none after the first Adam step, every score tied at 0 from the third
    step on; trained by `fit`, validation R@Sum 0 in every epoch for S_T-I on seeds 0-2 and S_I-T (τ 40) on
    seeds 0-1, as in the book's first Table 6). With the leaky clip a negative cosine keeps a tenth of its
    slope, so the scores never tie and training climbs out (the same runs: R@Sum 93-147 after 2-3 epochs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.image import Features, ImageEncoder, ImageEncoderConfig
from xmr_core.encoders.text import (
    BertEncoderConfig,
    BiGRUTextEncoder,
    FeatureTextEncoderConfig,
    TextEncoderConfig,
    build_text_encoder,
)
from xmr_core.losses import info_nce
from xmr_core.methods.base import RetrievalModel, checked_query_mask
from xmr_core.methods.registry import register_method

LocalDirection = Literal["I-T", "T-I", "joint"]
EPS = 1e-8  # Eq. (12)'s normalisation of a region that matches no query (choice 2)
LEAKY_SLOPE = 0.1  # the code's LeakyReLU(0.1) for [s]_+ (choice 11)
ImageEmbedding = tuple[Tensor, Tensor, Tensor]  # v (n, K, D) unit, region mask (n, K), v_glo (n, D) unit
QueryEmbedding = tuple[Tensor, Tensor]  # t (n, T, D) unit (0 where absent), query mask (n, T)


@dataclass
class HMRNConfig:
    """HMRN hyperparameters; defaults: the paper's (Sec. 4.2, 4.5), except `reasoning_activation` (choice 4) and
    `clip` (choice 11)."""

    embed_dim: int = 256  # D
    image: ImageEncoderConfig = field(default_factory=lambda: ImageEncoderConfig(kind="regions", region_dim=2048))
    text: TextEncoderConfig | BertEncoderConfig | FeatureTextEncoderConfig = field(default_factory=lambda: TextEncoderConfig(hidden=256))
    local: LocalDirection = "I-T"  # HMRN I-T (S_1, Eq. 18), HMRN T-I (S_2, Eq. 19), or both in one network
    # trained jointly (Table 9's "Joint", choice 10)
    lambda1: float = 5.0  # λ1, Eq. (4)
    lambda2: float = 15.0  # λ2, Eq. (7) and (12)
    icr_steps: int = 3  # L, Eq. (16)
    alpha: float = 0.4  # α, Eq. (18)-(19), (21)
    beta: float = 0.4  # β
    tau: float = 40.0  # τ, Eq. (20): a scale of the scores
    max_queries: int = 10  # N: the most queries a set holds (training draws this many)
    intra_mode: Literal["subtract", "concat"] = "subtract"  # Eq. (14) or Table 7's concatenation
    reasoning_activation: Literal["relu", "sigmoid"] = "sigmoid"  # S_R: the code's sigmoid or the paper's ReLU
    clip: Literal["leaky", "relu"] = "leaky"  # [s]_+ of Eq. (3)-(8), (12): the code's LeakyReLU(0.1) or the paper's
    # max(s, 0) (choice 11)

    def __post_init__(self) -> None:
        checks = [
            (self.embed_dim >= 1 and self.icr_steps >= 0 and self.max_queries >= 1,
             "need embed_dim >= 1, icr_steps >= 0 and max_queries >= 1"),
            (self.alpha >= 0 and self.beta >= 0 and self.alpha + self.beta <= 1 + 1e-12,
             f"alpha, beta must be >= 0 with alpha + beta <= 1, got {self.alpha}, {self.beta}"),
            (self.lambda1 > 0 and self.lambda2 > 0 and self.tau > 0, "lambda1, lambda2 and tau must be > 0"),
            (self.local in ("I-T", "T-I", "joint"), f"local must be 'I-T', 'T-I' or 'joint', got {self.local!r}"),
            (self.intra_mode in ("subtract", "concat"), f"unknown intra_mode {self.intra_mode!r}"),
            (self.reasoning_activation in ("relu", "sigmoid"),
             f"unknown reasoning_activation {self.reasoning_activation!r}"),
            (self.clip in ("leaky", "relu"), f"unknown clip {self.clip!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"HMRNConfig: {message}")

    def level_weights(self) -> dict[str, float]:
        """Eq. (18)-(19), (21): {"local": α, "global": 1 - α - β, "reasoning": β}."""
        rest = max(0.0, round(1.0 - self.alpha - self.beta, 12))
        return {"local": self.alpha, "global": rest, "reasoning": self.beta}

    @property
    def clip_slope(self) -> float:
        """The slope of [s]_+ below 0 (choice 11): 0.1 (`clip="leaky"`) or 0 (`"relu"`, max(s, 0))."""
        return LEAKY_SLOPE if self.clip == "leaky" else 0.0


def hmrn_config(encoders: Mapping[str, object], **overrides: object) -> HMRNConfig:
    """HMRN on a chapter's encoders (`embed_dim`, `image`, `text`), the paper's defaults unless overridden."""
    return HMRNConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


# ------------------------------------------------------------------- Sec. 3.1: representations, Eq. (1)-(2)
class QueryEncoder(BiGRUTextEncoder):
    """Eq. (2): a query (`tokens` (B, L), `lengths` (B,)) -> `Features` with local h_i = the mean of the forward
    and backward states (B, L, hidden) and global_ = t_j = h_M, the last word's, mapped to D when hidden != D
    (choice 1) (B, D)."""

    def __init__(self, word_vectors: np.ndarray, embed_dim: int, config: TextEncoderConfig) -> None:
        super().__init__(word_vectors, embed_dim, config)
        hidden = self.config.hidden
        self.fc = nn.Identity() if hidden == embed_dim else nn.Linear(hidden, embed_dim)  # type: ignore[assignment]
        self.local_dim = hidden

    def forward(self, batch: dict[str, Tensor]) -> Features:
        local, mask, _ = self.states(batch)
        hidden = self.config.hidden
        words = (local[..., :hidden] + local[..., hidden:]) / 2  # Eq. (2), (B, L, hidden)
        last = words[torch.arange(len(words), device=words.device), mask.sum(1) - 1]  # h_M (B, hidden)
        return Features(words, mask, self.fc(last))


# ------------------------------------------------------------------- Sec. 3.2.1: local level, Eq. (3)-(8)
def clipped_cosines(v: Tensor, region_mask: Tensor, t: Tensor, query_mask: Tensor, slope: float) -> Tensor:
    """[s(v_i, t_j)]_+ for every image x query set, a negative cosine times `slope` (choice 11; 0: max(s, 0)):
    v (I, K, D), t (Q, N, D) unit -> (I, Q, K, N), 0 wherever the region or the query is padding."""
    pair = region_mask[:, None, :, None] & query_mask[None, :, None, :]
    return F.leaky_relu(torch.einsum("ikd,qnd->iqkn", v, t), slope).masked_fill(~pair, 0.0)


def masked_mean(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Mean of x over the entries of `dim` where `mask` (broadcast to x) is True."""
    w = mask.to(x.dtype).expand_as(x)
    return (x * w).sum(dim) / w.sum(dim)


def local_image_text(pos: Tensor, region_mask: Tensor, query_mask: Tensor, lam: float) -> Tensor:
    """Eq. (3)-(5): each region's attended similarity over the queries (softmax of λ1 [s]_+ over the set's
    queries), averaged over the real regions. pos (I, Q, K, N) -> S_I-T (I, Q)."""
    alpha = (lam * pos).masked_fill(~query_mask[None, :, None, :], float("-inf")).softmax(-1)  # Eq. (4)
    per_region = (alpha * pos).sum(-1)  # Eq. (3), (I, Q, K)
    return masked_mean(per_region, region_mask[:, None, :], -1)  # Eq. (5)


def text_image_weights(pos: Tensor, region_mask: Tensor, lam: float) -> Tensor:
    """Eq. (7): α_ji, each query's softmax of λ2 [s]_+ over the real regions. pos (I, Q, K, N) -> (I, Q, K, N)."""
    return (lam * pos).masked_fill(~region_mask[:, None, :, None], float("-inf")).softmax(2)


def local_text_image(pos: Tensor, region_mask: Tensor, query_mask: Tensor, lam: float) -> Tensor:
    """Eq. (6)-(8): each query's attended similarity over the regions (softmax of λ2 [s]_+ over the real
    regions), averaged over the set's queries. pos (I, Q, K, N) -> S_T-I (I, Q)."""
    alpha = text_image_weights(pos, region_mask, lam)  # Eq. (7)
    per_query = (alpha * pos).sum(2)  # Eq. (6), (I, Q, N)
    return masked_mean(per_query, query_mask[None, :, :], -1)  # Eq. (8)


# ------------------------------------------------------------------- Sec. 3.2.2: global level, Eq. (9)-(11)
class SelfAttentionPool(nn.Module):
    """Eq. (9)-(10): s_i = softmax_i(W_s[(W_ave x_ave) ⊙ (W_r x_i)]) over the real items, x_ave their mean;
    x_glo = norm(Σ_i s_i x_i). x (B, L, D), mask (B, L) -> (B, D) unit."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w_ave = nn.Linear(dim, dim, bias=False)
        self.w_r = nn.Linear(dim, dim, bias=False)
        self.w_s = nn.Linear(dim, 1, bias=False)

    def weights(self, x: Tensor, mask: Tensor) -> Tensor:
        """Eq. (9)'s s_i (B, L), 0 on padding."""
        ave = masked_mean(x, mask[..., None], 1)  # (B, D)
        logits = self.w_s(self.w_ave(ave)[:, None, :] * self.w_r(x)).squeeze(-1)  # (B, L)
        return logits.masked_fill(~mask, float("-inf")).softmax(-1)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return F.normalize((self.weights(x, mask)[..., None] * x).sum(1), dim=-1)  # Eq. (10)


# ------------------------------------------------------------------- Sec. 3.3.1: intra-correlation, Eq. (12)-(14)
def project_regions(pos: Tensor, v: Tensor, region_mask: Tensor, lam: float) -> Tensor:
    """Eq. (12)-(13): v_j^p = Σ_i α_ji^p v_i, α^p = softmax over the real regions of λ2 s̃(t_j, v_i), s̃ = [s]_+
    L2-normalised over the set's queries. pos (I, Q, K, N), v (I, K, D) -> V_loc^p (I, Q, N, D)."""
    # Eq. (12)'s s̃ (absent queries hold 0); vector_norm: a zero row (max(s, 0) of a region that matches no query)
    # has a finite gradient, where sqrt(Σ s²) would give 0 / 0 = NaN
    s_tilde = pos / (torch.linalg.vector_norm(pos, dim=-1, keepdim=True) + EPS)
    alpha = (lam * s_tilde).masked_fill(~region_mask[:, None, :, None], float("-inf")).softmax(2)
    return torch.einsum("iqkn,ikd->iqnd", alpha, v)  # Eq. (13)


class IntraCorrelation(nn.Module):
    """Eq. (14): C = norm(W_c |V - T|²) per node (or Table 7's norm(W_c [V ; T])). V, T (..., N + 1, D) ->
    C (..., N + 1, D)."""

    def __init__(self, dim: int, mode: Literal["subtract", "concat"] = "subtract") -> None:
        super().__init__()
        self.mode = mode
        self.w_c = nn.Linear(dim if mode == "subtract" else 2 * dim, dim, bias=False)

    def forward(self, visual: Tensor, textual: Tensor) -> Tensor:
        pair = (visual - textual).square() if self.mode == "subtract" else torch.cat([visual, textual], -1)
        return F.normalize(self.w_c(pair), dim=-1)


# ------------------------------------------------------------------- Sec. 3.3.2: inter-correlation, Eq. (15)-(16)
class InterCorrelationStep(nn.Module):
    """One reasoning step: A(C_q, C_k) = softmax over the real source nodes q of (W_q C_q)^T (W_k C_k) (Eq. 15);
    C_k <- ReLU(W_R Σ_q A(C_q, C_k) C_q) (Eq. 16). C (..., P, D), node_mask (..., P) -> (..., P, D)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w_q = nn.Linear(dim, dim, bias=False)
        self.w_k = nn.Linear(dim, dim, bias=False)
        self.w_r = nn.Linear(dim, dim, bias=False)

    def affinity(self, c: Tensor, node_mask: Tensor) -> Tensor:
        """Eq. (15): A (..., P, P), entry [q, k], each column summing to 1 over the real q."""
        logits = self.w_q(c) @ self.w_k(c).transpose(-1, -2)  # [q, k] = (W_q C_q)^T (W_k C_k)
        return logits.masked_fill(~node_mask[..., :, None], float("-inf")).softmax(-2)

    def forward(self, c: Tensor, node_mask: Tensor) -> Tensor:
        return F.relu(self.w_r(self.affinity(c, node_mask).transpose(-1, -2) @ c))  # Eq. (16)

    def global_node(self, c: Tensor, node_mask: Tensor) -> Tensor:
        """The step's update of the global node (the last) alone, `forward(c, node_mask)[..., -1, :]` (..., D): its
        column of Eq. (15), (W_q C_q)^T (W_k C_glo) = C_q^T (W_q^T W_k C_glo), needs no node but C_glo projected."""
        u = self.w_k(c[..., -1, :]) @ self.w_q.weight  # W_q^T W_k C_glo (..., D)
        logits = (c @ u[..., None]).squeeze(-1).masked_fill(~node_mask, float("-inf"))  # (..., P)
        return F.relu(self.w_r((logits.softmax(-1)[..., None, :] @ c).squeeze(-2)))  # Eq. (16) at k = glo


class Levels(NamedTuple):
    """The three similarities of every image x query set, each (I, Q): local (S_I-T or S_T-I; the joint model's
    S_I-T), global (S_G), reasoning (S_R); `local_ti`: the joint model's S_T-I (None otherwise)."""

    local: Tensor
    global_: Tensor
    reasoning: Tensor
    local_ti: Tensor | None = None


# ------------------------------------------------------------------- the model
@register_method(HMRNConfig)
class HMRN(RetrievalModel):
    """HMRN I-T or T-I (`config.local`). Image embeddings `(v, region_mask, v_glo)`; query-set embeddings
    `(t, query_mask)` with the rounds on dim 1; a caption is a set of one query. `score` -> (n_img, n_sets)."""

    name = "hmrn"
    task = "multi_query"

    def __init__(self, config: HMRNConfig, word_vectors: np.ndarray) -> None:
        super().__init__()
        self.config = config
        d = config.embed_dim
        # Sec. 3.1 (choice 1)
        self.image_encoder = ImageEncoder(config.image, d)
        regions = config.image.kind == "regions"
        self.image_fc = nn.Identity() if regions else nn.Linear(self.image_encoder.local_dim, d)
        if isinstance(config.text, TextEncoderConfig):
            self.text_encoder: nn.Module = QueryEncoder(word_vectors, d, config.text)
        else:
            self.text_encoder = build_text_encoder(word_vectors, d, config.text)
        # Sec. 3.2.2
        self.image_pool, self.query_pool = SelfAttentionPool(d), SelfAttentionPool(d)
        # Sec. 3.3
        self.intra = IntraCorrelation(d, config.intra_mode)
        self.inter = nn.ModuleList(InterCorrelationStep(d) for _ in range(config.icr_steps))
        self.reasoning_fc = nn.Linear(d, 1)

    @property
    def max_queries(self) -> int:
        return self.config.max_queries

    def backbone_parameters(self) -> list[nn.Parameter]:
        return self.image_encoder.backbone_parameters() + self.text_encoder.backbone_parameters()

    # Sec. 3.1
    def encode_images(self, batch: dict[str, Tensor]) -> ImageEmbedding:
        """(v (B, K, D) unit, 0 on padding; region_mask (B, K); v_glo (B, D), Eq. 9-10)."""
        features = self.image_encoder(batch)
        v = F.normalize(self.image_fc(features.local), dim=-1).masked_fill(~features.mask[..., None], 0.0)  # Eq. (1)
        return v, features.mask, self.image_pool(v, features.mask)

    def encode_text(self, batch: dict[str, Tensor]) -> Tensor:
        """Each query of `tokens` (B, L), `lengths` (B,) alone: t_j (B, D) unit (Eq. 2)."""
        return F.normalize(self.text_encoder(batch).global_, dim=-1)

    def encode_captions(self, batch: dict[str, Tensor]) -> QueryEmbedding:
        """Each caption as a set of one query: (t (B, 1, D), query_mask (B, 1))."""
        t = self.encode_text(batch)
        return t[:, None, :], torch.ones(len(t), 1, dtype=torch.bool, device=t.device)

    def encode_queries(self, batch: dict[str, Tensor]) -> QueryEmbedding:
        """The sets of a `query_loader` batch ("query_tokens" (B, T, L), "query_lengths", "query_mask" (B, T),
        "image_index"): (t (B, T, D) unit, 0 where absent; query_mask (B, T)). A set longer than
        `max_queries`, empty, or with a gap is an error naming its image."""
        mask = checked_query_mask(batch, self.max_queries, "HMRN")
        flat = self.encode_text({"tokens": batch["query_tokens"][mask], "lengths": batch["query_lengths"][mask]})
        t = flat.new_zeros(*mask.shape, flat.shape[-1]).masked_scatter(mask[..., None], flat)
        return t, mask

    # Sec. 3.2-3.3: every image x query set of two blocks
    def correlation_nodes(self, pos: Tensor, img: ImageEmbedding, queries: QueryEmbedding,
                          t_glo: Tensor) -> tuple[Tensor, Tensor]:
        """Sec. 3.3.1: the intra-correlation vectors C (I, Q, N + 1, D) of Eq. (14), the global node last, and the
        node mask (1, Q, N + 1), from pos (I, Q, K, N) = [s]_+, the images' and the sets' embeddings, t_glo (Q, D)."""
        v, region_mask, v_glo = img
        t, query_mask = queries
        n_img, n_sets = len(v), len(t)
        v_p = project_regions(pos, v, region_mask, self.config.lambda2)  # (I, Q, N, D)
        visual = torch.cat([v_p, v_glo[:, None, None, :].expand(-1, n_sets, 1, -1)], 2)  # V (I, Q, N + 1, D)
        textual = torch.cat([t, t_glo[:, None, :]], 1)[None].expand(n_img, -1, -1, -1)  # T (I, Q, N + 1, D)
        nodes = torch.cat([query_mask, query_mask.new_ones(n_sets, 1)], 1)[None]  # (1, Q, N + 1)
        return self.intra(visual, textual), nodes  # Eq. (14)

    def reasoning(self, pos: Tensor, img: ImageEmbedding, queries: QueryEmbedding, t_glo: Tensor) -> Tensor:
        """Sec. 3.3: S_R (I, Q) from pos (I, Q, K, N) = [s]_+, the images' and the sets' embeddings, t_glo (Q, D)."""
        c, nodes = self.correlation_nodes(pos, img, queries, t_glo)
        steps = list(self.inter)  # Eq. (15)-(16), L steps; only c*_glo leaves the last, so it updates that node alone
        for step in steps[:-1]:
            c = step(c, nodes)
        glo = steps[-1].global_node(c, nodes) if steps else c[:, :, -1]
        out = self.reasoning_fc(glo).squeeze(-1)  # the global node c*_glo
        return F.relu(out) if self.config.reasoning_activation == "relu" else torch.sigmoid(out)

    def levels(self, img: ImageEmbedding, queries: QueryEmbedding) -> Levels:
        """The three similarities of every image x query set; a level of weight 0 is left at 0 (not computed)."""
        v, region_mask, v_glo = img
        t, query_mask = queries
        weights, cfg = self.config.level_weights(), self.config
        pos = clipped_cosines(v, region_mask, t, query_mask, cfg.clip_slope)  # (I, Q, K, N)
        zero = pos.new_zeros(len(v), len(t))
        local, local_ti = zero, None
        if weights["local"] > 0:
            local = (local_text_image(pos, region_mask, query_mask, cfg.lambda2) if cfg.local == "T-I"
                     else local_image_text(pos, region_mask, query_mask, cfg.lambda1))
            if cfg.local == "joint":
                local_ti = local_text_image(pos, region_mask, query_mask, cfg.lambda2)
        t_glo = self.query_pool(t, query_mask)  # (Q, D), Eq. (9)-(10) over the set
        global_ = v_glo @ t_glo.T if weights["global"] > 0 else zero  # Eq. (11)
        reasoning = self.reasoning(pos, img, queries, t_glo) if weights["reasoning"] > 0 else zero
        return Levels(local, global_, reasoning, local_ti)

    # Sec. 3.4
    def aggregate(self, levels: Levels) -> Tensor:
        """Eq. (18) / (19): α S_L + β S_R + (1 - α - β) S_G, (I, Q); the joint model: S_1 + S_2 (Eq. 17) of its
        two local similarities and its shared S_G and S_R."""
        w = self.config.level_weights()
        s = w["local"] * levels.local + w["reasoning"] * levels.reasoning + w["global"] * levels.global_
        if levels.local_ti is not None:
            s = s + w["local"] * levels.local_ti + w["reasoning"] * levels.reasoning + w["global"] * levels.global_
        return s

    def score(self, img_emb: ImageEmbedding, query_emb: QueryEmbedding) -> Tensor:
        """S_1 or S_2 (Eq. 18-19) of every image x query set: (n_img, n_sets)."""
        return self.aggregate(self.levels(img_emb, query_emb))

    def batch_scores(self, img_emb: ImageEmbedding, query_emb: QueryEmbedding) -> Tensor:
        """(B, B), with gradients: the same similarity as `score`."""
        return self.score(img_emb, query_emb)

    # Sec. 3.5
    def loss(self, img_emb: ImageEmbedding, query_emb: QueryEmbedding,
             batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Eq. (21): Σ_level w_level · Eq. (20)'s InfoNCE (scale τ) on that level's (B, B) similarities; the joint
        model: the I-T model's Eq. (21) plus the T-I model's on the one network (shared levels counted twice)."""
        levels = self.levels(img_emb, query_emb)
        same_image = batch["image_index"][:, None] == batch["image_index"][None, :]
        nce = lambda scores: 2.0 * info_nce(scores, scale=self.config.tau, positive_mask=same_image)  # Eq. (20)
        shared = 2.0 if levels.local_ti is not None else 1.0  # S_G and S_R are in both models' losses
        total, logs = levels.local.new_zeros(()), {}
        for name, weight in self.config.level_weights().items():
            if weight > 0:
                term = nce(getattr(levels, "global_" if name == "global" else name))
                total = total + weight * (1.0 if name == "local" else shared) * term
                logs[f"nce_{name}"] = term.item()
                if name == "local" and levels.local_ti is not None:
                    term_ti = nce(levels.local_ti)
                    total = total + weight * term_ti
                    logs["nce_local_ti"] = term_ti.item()
        return total, logs


class HMRNEnsemble(RetrievalModel):
    """Eq. (17): S_ensemble = S_1 + S_2 of an HMRN I-T and an HMRN T-I trained separately (evaluation only).
    Embeddings: the two models' tuples concatenated (image: 3 + 3 tensors, query sets: 2 + 2)."""

    name = "hmrn-ensemble"
    task = "multi_query"

    def __init__(self, image_text: HMRN, text_image: HMRN) -> None:
        super().__init__()
        if (image_text.config.local, text_image.config.local) != ("I-T", "T-I"):
            raise ValueError("HMRNEnsemble takes an HMRN I-T and an HMRN T-I, got "
                             f"{image_text.config.local} and {text_image.config.local}")
        if image_text.visual != text_image.visual:
            raise ValueError(f"HMRNEnsemble: the models read different visual inputs ({image_text.visual}, "
                             f"{text_image.visual})")
        self.members = nn.ModuleList([image_text, text_image])
        self.config = {"image_text": image_text.config, "text_image": text_image.config}

    @property
    def visual(self) -> str:
        return self.members[0].visual

    @property
    def max_queries(self) -> int:
        return min(m.max_queries for m in self.members)

    def encode_images(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return tuple(e for m in self.members for e in m.encode_images(batch))

    def encode_captions(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return tuple(e for m in self.members for e in m.encode_captions(batch))

    def encode_queries(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return tuple(e for m in self.members for e in m.encode_queries(batch))

    def score(self, img_emb: tuple[Tensor, ...], query_emb: tuple[Tensor, ...]) -> Tensor:
        """S_1 + S_2, (n_img, n_sets)."""
        s_1 = self.members[0].score(img_emb[:3], query_emb[:2])
        return s_1 + self.members[1].score(img_emb[3:], query_emb[2:])
