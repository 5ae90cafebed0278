"""MSRM: Multilateral Semantic Relations Modeling (Wang et al., CVPR 2023), Section 3.

No public code exists (`shared/notes/official-code.md`, section 6): this is a re-implementation from the
paper's text. Read top to bottom, this file follows Sec. 3:

1. Sec. 3.2, Eq. (1)-(3): the Gaussian encoder. MSRM "shares the main architecture with PCME" (Sec. 4.2), so
   the trunks and heads are PCME's (`xmr_core.methods.pcme.build_head`, reused as they are): each image and
   caption is `N(mu, diag(sigma^2))`, a `(mu, logvar)` pair, both (n, D), logvar = log sigma^2. A query
   keeps its whole Gaussian; a candidate is represented by its mean alone (end of Sec. 3.2).
2. Sec. 3.3, Eq. (4): the squared Mahalanobis distance from a query's Gaussian to a candidate's mean.
3. Eq. (5): the batch probability P_qc = softmax_c(-tau d_m^2(q, c)) over the candidates of the batch.
4. Eq. (6)-(7): the soft contrastive loss, -log P for matches and -log(1 - P) otherwise, averaged over the
   B^2 pairs of each direction; L_d = L_d,v2t + L_d,t2v.
5. Sec. 3.4, Eq. (8): the soft incidence S_qc, 1 for a match, a weight in [0, 1] that decays with
   d_m^2(q, c) otherwise.
6. Eq. (9)-(10): each candidate is a hypergraph vertex, each query a hyperedge with incidence S (so H = S^T,
   vertices x edges); l layers of HGNN convolution update the candidates' means.
7. Eq. (11): P'_qc = softmax_c(lambda cos(mu_q, u_c)) with the updated candidates u_c; L_h is Eq. (6)-(7)
   on P'. Eq. (12): L = gamma L_d + L_h.

Test-time score (the paper does not say; our reading). Retrieval ranks the gallery by the Eq. (5) probability,
i.e. by -d_m^2(q, c), the query's Gaussian against each candidate's mean. Reasons: (a) Sec. 3.2 "we actually
employ the intact embedding of a given query while only the mean semantic mu of all candidates to perform
one-to-many (distribution-to-points) correspondence", and Sec. 3.3 calls d_m^2 "the distance metric between a
given query q and a candidate c"; (b) Table 4's "mu only" row ("we further bypass the variance of query
embedding") only changes results if the query's variance enters the test-time score; (c) the hypergraph
cannot be built at test time: Eq. (8) needs the match labels (S_qc = 1 for a match) and Eq. (10) a batch of
candidates, and the paper never describes a test-time hypergraph, so Sec. 3.4 is read as a training-time
objective that shapes the means. For one query the softmax of Eq. (5) is monotone in -d_m^2, so scoring by
-d_m^2 ranks exactly as P_qc does and needs no normalisation over a gallery that `score` only sees in chunks.

The score depends on the direction, because the query's covariance is used: i2t takes the image's Gaussian
and the captions' means, t2i the caption's Gaussian and the images' means. `MSRM.score(img, cap, direction)`
returns `(n_img, n_cap)` for either ("i2t", "t2i"), or "both", the mean of the two (the default,
`MSRMConfig.test_direction`). MSRM is `directional`: `xmr_core.evaluate` (validation in `fit` included) takes
i2t metrics from `score_direction(..., "i2t")` and t2i metrics from `score_direction(..., "t2i")`
(`evaluate.direction_scores`), the paper's protocol.

Choices the paper leaves open, each stated once:
- Variance: Eq. (2) gives sigma = ReLU(...) (a variance that can be 0, and Eq. 4 divides by it); PCME's heads
  give logvar, so sigma_q^{-1} in Eq. (4) is exp(-logvar). The logvar bias starts at `init_logvar` = 0 (unit
  variance), so d_m^2 starts as the squared Euclidean distance of unit means, in [0, 4]: with tau = 10 the
  Eq. (5) logits start in a trainable range (PCME's -8 would put them near -1e5).
- No KL or uniformity regulariser: Eq. (12) lists only L_d and L_h.
- Eq. (8)'s sign. As printed, S = e^{alpha d^2} with alpha = 2 (Sec. 4.4) exceeds 1, against the stated
  S in [0, 1]; the sign flip e^{-alpha d^2} gives S = 1 for every pair at alpha = 0, i.e. a complete hypergraph
  (every vertex in every hyperedge), not the "bi-polar setting" that Sec. 4.4 says alpha = 0 gives. Default
  (`incidence="bandwidth"`): S = exp(-d^2 / alpha), alpha > 0 a learnable bandwidth; S is in (0, 1], larger
  alpha lets more non-positives in ("controls the ratio of non-positive samples"), and alpha -> 0 gives the
  bipolar Eq. (9) incidence (1 for matches, 0 otherwise), which alpha = 0 selects (then alpha is fixed).
  `incidence="rate"`: S = exp(-alpha d^2), the sign-flipped formula, for comparison.
- S is not detached: L_h trains alpha and, through d_m^2, the Gaussian heads.
- Eq. (10): no hyperedge weights (W = I, as printed), no bias in Theta (as printed), no dropout; the degrees
  of the soft H are HGNN's sums, d(v) = sum_e h(v, e), delta(e) = sum_v h(v, e). The sigmoid follows every
  layer as printed (`final_activation=True`); HGNN itself has no activation after its last layer
  (`final_activation=False`). Separate Theta for caption vertices (v2t) and image vertices (t2v)
  (`share_hgnn=False`). Measured on a toy batch (B = 12, D = 16, Adam 1e-3, 150 steps; not a result): with
  the printed last sigmoid L_h stayed near its uniform-P' value (0.574 -> 0.565) while L_d fell to 1e-3;
  without it L_h fell to 0.48 (init_logvar 0) and 0.27 (init_logvar -2, a sparser S). The soft incidence of
  a near-complete hypergraph (d_m^2 <= 4 early on, so S >= e^-2 off the matches) smooths the candidates
  towards their mean, and the sigmoid squeezes what is left: the chapter should tune `final_activation` and
  `init_logvar` on validation.
- Eq. (11) prints exp(-lambda cos): with -log P' for matches that would push matches apart, so the sign is
  read as a cosine *distance*, exp(-lambda (1 - cos)), which is the same softmax as exp(lambda cos).
- Matches: a pair is a match when it shares the image, or the captions are the same token sequence
  (`base.in_batch_positives`), in Eq. (6) and Eq. (8) alike.
- tau, lambda, alpha are raw learnable scalars (initial 10, 5, 2), clamped at 1e-4 (alpha: 1e-6) where used.
- Reduction: the mean over the B^2 pairs of each direction, as Eq. (7) prints (`reduction="sum"` is there
  for comparison with PCME's summed loss).
- "mu only" (Table 4): `mu_only=True` drops the variance (unit covariance for every query), so d_m^2 is the
  squared Euclidean distance of the means; "w/o L_d" is gamma = 0; "w/o L_h" is `hypergraph=False`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.base import in_batch_positives
from xmr_core.methods.pcme import PCMEConfig, build_head, uncertainty
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.similarity import Gaussian

Direction = Literal["i2t", "t2i", "both"]
DIRECTIONS: tuple[str, ...] = ("i2t", "t2i", "both")
Incidence = Literal["bandwidth", "rate"]
DEFAULT_CHUNK = 1024  # candidates per block of the test-time score
_MIN_TEMPERATURE = 1e-4
_MIN_ALPHA = 1e-6


@dataclass
class MSRMConfig:
    """MSRM hyperparameters; defaults: the paper's (Sec. 4.2, 4.4) on PCME's encoders."""

    embed_dim: int = 256
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    gamma: float = 0.8  # Eq. (12): weight of L_d
    init_tau: float = 10.0  # Eq. (5): learnable temperature tau
    init_lambda: float = 5.0  # Eq. (11): learnable temperature lambda
    init_alpha: float = 2.0  # Eq. (8): learnable alpha; 0 = the bipolar incidence (fixed)
    incidence: Incidence = "bandwidth"  # Eq. (8): exp(-d^2 / alpha) ("bandwidth") or exp(-alpha d^2) ("rate")
    hgnn_layers: int = 2  # l of Eq. (10)
    final_activation: bool = True  # Eq. (10) as printed: sigmoid after every layer (HGNN: not after the last)
    share_hgnn: bool = False  # one Theta stack for caption and image vertices
    hypergraph: bool = True  # False: "w/o L_h" (Table 4)
    mu_only: bool = False  # "mu only" (Table 4): no variance, d_m^2 = squared Euclidean distance of the means
    local_attention: bool = True  # PCME's local attention branch of the heads
    init_logvar: float = 0.0  # initial log sigma^2 of the heads (unit variance)
    reduction: Literal["mean", "sum"] = "mean"  # Eq. (7): 1/B^2 sum over pairs
    test_direction: Direction = "both"  # what `score` returns without a direction
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.init_tau <= 0 or self.init_lambda <= 0:
            raise ValueError(f"MSRMConfig: tau and lambda must be > 0, got {self.init_tau} and {self.init_lambda}")
        if self.init_alpha < 0:
            raise ValueError(f"MSRMConfig: alpha must be >= 0 (0 = bipolar incidence), got {self.init_alpha}")
        if self.incidence not in ("bandwidth", "rate"):
            raise ValueError(f"MSRMConfig: unknown incidence {self.incidence!r}; choose 'bandwidth' or 'rate'")
        if self.hgnn_layers < 1:
            raise ValueError(f"MSRMConfig: hgnn_layers must be >= 1, got {self.hgnn_layers}")
        if self.test_direction not in DIRECTIONS:
            raise ValueError(f"MSRMConfig: unknown test_direction {self.test_direction!r}; choose one of {DIRECTIONS}")
        if self.reduction not in ("mean", "sum"):
            raise ValueError(f"MSRMConfig: unknown reduction {self.reduction!r}; choose 'mean' or 'sum'")
        if self.gamma < 0:
            raise ValueError(f"MSRMConfig: gamma must be >= 0, got {self.gamma}")
        if self.gamma == 0 and not self.hypergraph:
            raise ValueError("MSRMConfig: gamma = 0 without the hypergraph leaves no loss (Eq. 12 is gamma L_d + L_h)")

    def head_config(self) -> PCMEConfig:
        """The PCME config whose heads MSRM uses (`pcme.build_head`)."""
        return PCMEConfig(embed_dim=self.embed_dim, image=self.image, text=self.text, mu_only=self.mu_only,
                          test_similarity="mean_cosine" if self.mu_only else "match_prob",
                          local_attention=self.local_attention, init_logvar=self.init_logvar, dropout=self.dropout)


def msrm_config(encoders: Mapping[str, object], **overrides: object) -> MSRMConfig:
    """MSRM on a chapter's encoders (`pcme.encoder_configs`), the paper's defaults unless overridden."""
    return MSRMConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ 2. Eq. (4)
def mahalanobis(query: Gaussian, candidates: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """Eq. (4): d_m^2(q, c) = (u_c - mu_q)^T diag(sigma_q^2)^{-1} (u_c - mu_q).

    query `(mu, logvar)` both (n_q, D), candidates' means (n_c, D) -> (n_q, n_c), differentiable. Computed as
    sum_d w u_c^2 - 2 sum_d w mu_q u_c + sum_d w mu_q^2 with w = exp(-logvar_q) (three matmuls, no
    (n_q, n_c, D) tensor), clamped at 0; `chunk_size` candidates a block (None: all at once). In fp32 at least, under
    autocast too: the three terms nearly cancel, and w overflows fp16 below a log-variance of -11.
    """
    mu, logvar = query
    if mu.ndim != 2 or mu.shape != logvar.shape or candidates.ndim != 2 or candidates.shape[1] != mu.shape[1]:
        raise ValueError(f"mahalanobis: query mu {tuple(mu.shape)}, logvar {tuple(logvar.shape)} must be equal "
                         f"(n_q, D) and candidates (n_c, D), got {tuple(candidates.shape)}")
    size = len(candidates) if chunk_size is None else chunk_size
    if size < 1:
        raise ValueError(f"mahalanobis: chunk_size must be >= 1, got {chunk_size}")
    with torch.autocast(device_type=mu.device.type, enabled=False):
        dtype = torch.promote_types(mu.dtype, torch.float32)  # fp16 / bf16 inputs -> fp32; fp32, fp64 as they are
        mu, logvar, candidates = mu.to(dtype), logvar.to(dtype), candidates.to(dtype)
        w = torch.exp(-logvar)  # diagonal of sigma_q^{-1}, (n_q, D)
        w_mu = w * mu  # (n_q, D)
        const = (w_mu * mu).sum(-1, keepdim=True)  # (n_q, 1)
        blocks = []
        for start in range(0, len(candidates), size):
            u = candidates[start:start + size]  # (c, D)
            blocks.append((w @ u.square().T - 2.0 * w_mu @ u.T + const).clamp_min(0.0))
        return torch.cat(blocks, dim=1) if blocks else mu.new_zeros(len(mu), 0)


# ------------------------------------------------------------------------------ 3-4. Eq. (5)-(7)
def log_batch_probability(d2: Tensor, tau: Tensor | float) -> Tensor:
    """Eq. (5): log P_qc = log softmax_c(-tau d_m^2(q, c)) over the candidates of the batch. (n_q, n_c) -> same."""
    return torch.log_softmax(-tau * d2, dim=1)


def _log1mexp(log_p: Tensor) -> Tensor:
    """log(1 - p) from log p <= 0, stable near both ends (Maechler's log1mexp), p kept just below 1."""
    x = log_p.clamp_max(-1e-7)
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def soft_contrastive(log_p: Tensor, matched: Tensor, reduction: Literal["mean", "sum"] = "mean") -> Tensor:
    """Eq. (6)-(7), one direction: -log P_qc for matches, -log(1 - P_qc) otherwise, averaged over the pairs.

    log_p (n_q, n_c) log-probabilities, queries as rows; matched bool (n_q, n_c) -> scalar (1/(n_q n_c) sum,
    or the sum).
    """
    if log_p.shape != matched.shape or matched.dtype != torch.bool:
        raise ValueError(f"soft_contrastive: log_p {tuple(log_p.shape)} and a bool matched of the same shape needed, "
                         f"got {matched.dtype} {tuple(matched.shape)}")
    nll = torch.where(matched, -log_p, -_log1mexp(log_p))
    return nll.mean() if reduction == "mean" else nll.sum()


# ------------------------------------------------------------------------------ 5-6. Eq. (8)-(10)
def soft_incidence(d2: Tensor, matched: Tensor, alpha: Tensor | float, form: Incidence = "bandwidth") -> Tensor:
    """Eq. (8): S_qc = 1 for a match, else exp(-d^2 / alpha) ("bandwidth"; alpha = 0: 0, Eq. 9's bipolar
    incidence) or exp(-alpha d^2) ("rate"); alpha >= 0, so S is in [0, 1]. d2, matched (n_q, n_c) -> S (n_q, n_c)."""
    alpha_t = torch.as_tensor(alpha, dtype=d2.dtype, device=d2.device)
    if form == "rate":
        weight = torch.exp(-alpha_t * d2)
    elif form == "bandwidth":
        if float(alpha_t.detach()) == 0.0:
            weight = torch.zeros_like(d2)
        else:
            weight = torch.exp(-d2 / alpha_t.clamp_min(_MIN_ALPHA))
    else:
        raise ValueError(f"soft_incidence: unknown form {form!r}; choose 'bandwidth' or 'rate'")
    return torch.where(matched, torch.ones_like(d2), weight)


def hypergraph_operator(incidence: Tensor, eps: float = 1e-12) -> Tensor:
    """Eq. (10)'s propagation G = D_v^{-1/2} H D_e^{-1} H^T D_v^{-1/2} (HGNN with W = I).

    incidence H (n_v, n_e), vertices x hyperedges, entries in [0, 1]; d(v) = sum_e h(v, e) and
    delta(e) = sum_v h(v, e) (clamped at eps) -> G (n_v, n_v).
    """
    if incidence.ndim != 2:
        raise ValueError(f"hypergraph_operator: H must be (n_vertices, n_edges), got {tuple(incidence.shape)}")
    dv = incidence.sum(1).clamp_min(eps).rsqrt()  # D_v^{-1/2}, (n_v,)
    de = incidence.sum(0).clamp_min(eps).reciprocal()  # D_e^{-1}, (n_e,)
    h = dv[:, None] * incidence  # D_v^{-1/2} H
    return (h * de[None, :]) @ h.T


class HypergraphConv(nn.Module):
    """One layer of Eq. (10): U' = sg(G U Theta), Theta (D, D) without bias; `activation=False` drops sg."""

    def __init__(self, dim: int, activation: bool = True) -> None:
        super().__init__()
        self.theta = nn.Linear(dim, dim, bias=False)
        self.activation = activation

    def forward(self, x: Tensor, operator: Tensor) -> Tensor:
        """x (n_v, D), operator G (n_v, n_v) -> (n_v, D)."""
        out = operator @ self.theta(x)
        return torch.sigmoid(out) if self.activation else out


class HGNN(nn.Module):
    """l layers of Eq. (10) on one hypergraph: candidates' means (n_v, D) + H (n_v, n_e) -> (n_v, D)."""

    def __init__(self, dim: int, layers: int = 2, final_activation: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            HypergraphConv(dim, activation=final_activation or i < layers - 1) for i in range(layers))

    def forward(self, x: Tensor, incidence: Tensor) -> Tensor:
        operator = hypergraph_operator(incidence)
        for layer in self.layers:
            x = layer(x, operator)
        return x


# ------------------------------------------------------------------------------ 7. Eq. (11)
def log_cosine_probability(mu_q: Tensor, u_c: Tensor, lam: Tensor | float) -> Tensor:
    """Eq. (11): log P'_qc = log softmax_c(-lambda (1 - cos(mu_q, u_c))) = log softmax_c(lambda cos).
    mu_q (n_q, D), u_c (n_c, D) -> (n_q, n_c)."""
    cos = F.normalize(mu_q, dim=-1) @ F.normalize(u_c, dim=-1).T
    return torch.log_softmax(lam * cos, dim=1)


# ------------------------------------------------------------------------------ the model
@register_method(MSRMConfig)
class MSRM(TwoTower):
    """MSRM. Embeddings: a Gaussian `(mu, logvar)`, both (n, D) (mu-only variant: mu (n, D)). The towers are
    E_v's and E_t's trunks (Eq. 1-2). Directional: the query's covariance shapes the scores."""

    name = "msrm"
    directional = True

    def __init__(self, config: MSRMConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        heads = config.head_config()
        self.image_head = build_head(self.image_encoder.local_dim, heads)  # (mu_v, sigma_v), Eq. (1)-(3)
        self.text_head = build_head(self.text_encoder.local_dim, heads)  # (mu_t, sigma_t)
        self.tau = nn.Parameter(torch.tensor(float(config.init_tau)))  # Eq. (5)
        if config.hypergraph:
            self.lam = nn.Parameter(torch.tensor(float(config.init_lambda)))  # Eq. (11)
            if config.init_alpha > 0:
                self.alpha = nn.Parameter(torch.tensor(float(config.init_alpha)))  # Eq. (8)
            else:  # the bipolar incidence: nothing to learn
                self.register_buffer("alpha", torch.tensor(0.0))
            sizes = (config.embed_dim, config.hgnn_layers, config.final_activation)
            self.hgnn_cap = HGNN(*sizes)  # Eq. (10) on caption vertices, image hyperedges (v2t)
            self.hgnn_img = self.hgnn_cap if config.share_hgnn else HGNN(*sizes)  # image vertices (t2v)

    # Eq. (3): G_v = N(mu_v, diag(sigma_v)), G_t likewise: `TwoTower.encode_images` / `encode_captions`
    # through `image_head` / `text_head`.

    @staticmethod
    def gaussian(emb: Tensor | Gaussian) -> Gaussian:
        """(mu, logvar); the mu-only variant's query has unit variance (logvar = 0)."""
        if isinstance(emb, Tensor):
            return emb, torch.zeros_like(emb)
        return emb[0], emb[1]

    def temperatures(self) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """tau, lambda, alpha as used (clamped positive; lambda and alpha None without the hypergraph)."""
        tau = self.tau.clamp_min(_MIN_TEMPERATURE)
        if not self.config.hypergraph:
            return tau, None, None
        if not isinstance(self.alpha, nn.Parameter):  # alpha = 0: the bipolar incidence
            return tau, self.lam.clamp_min(_MIN_TEMPERATURE), self.alpha
        alpha = self.alpha.clamp_min(0.0 if self.config.incidence == "rate" else _MIN_ALPHA)
        return tau, self.lam.clamp_min(_MIN_TEMPERATURE), alpha

    def direction_losses(self, query: Gaussian, cand_mu: Tensor, matched: Tensor,
                         hgnn: HGNN | None) -> tuple[Tensor, Tensor | None, Tensor]:
        """One retrieval direction: queries' Gaussians (B, D) x2, candidates' means (B, D), matched (B, B),
        queries as rows -> (L_d of Eq. 6-7, L_h of Eq. 8-11 or None, P of Eq. 5)."""
        tau, lam, alpha = self.temperatures()
        reduction = self.config.reduction
        d2 = mahalanobis(query, cand_mu)  # Eq. (4), (B, B)
        log_p = log_batch_probability(d2, tau)  # Eq. (5)
        loss_d = soft_contrastive(log_p, matched, reduction)  # Eq. (6)-(7)
        loss_h = None
        if hgnn is not None:
            s = soft_incidence(d2, matched, alpha, self.config.incidence)  # Eq. (8), (B queries, B candidates)
            u = hgnn(cand_mu, s.T)  # Eq. (10): vertices = candidates, hyperedges = queries
            loss_h = soft_contrastive(log_cosine_probability(query[0], u, lam), matched, reduction)  # Eq. (11), (6)
        return loss_d, loss_h, log_p.exp()

    def loss(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian,
             batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Eq. (12): L = gamma (L_d,v2t + L_d,t2v) + (L_h,v2t + L_h,t2v) on a batch of B pairs."""
        cfg = self.config
        img, cap = self.gaussian(img_emb), self.gaussian(cap_emb)
        matched = in_batch_positives(batch)  # (B images, B captions)
        hg = cfg.hypergraph
        d_v2t, h_v2t, p_v2t = self.direction_losses(img, cap[0], matched, self.hgnn_cap if hg else None)
        d_t2v, h_t2v, p_t2v = self.direction_losses(cap, img[0], matched.T, self.hgnn_img if hg else None)
        loss_d = d_v2t + d_t2v  # Eq. (7)
        # gamma = 0 ("w/o L_d") leaves L_d out of the loss rather than multiplying it by 0: once a query's
        # variance collapses (only S trains it then), d_m^2 overflows, L_d is NaN and 0 * NaN would poison L_h.
        total = cfg.gamma * loss_d if cfg.gamma > 0 else loss_d.new_zeros(())
        tau, lam, alpha = self.temperatures()
        logs: dict[str, float] = {"L_d": loss_d.item(), "tau": tau.item()}
        if hg:
            loss_h = h_v2t + h_t2v  # L_h = L_h,v2t + L_h,t2v
            total = total + loss_h  # Eq. (12)
            logs.update({"L_h": loss_h.item(), "lambda": lam.item(), "alpha": alpha.item()})
        with torch.no_grad():
            logs["p_pos"] = 0.5 * (p_v2t[matched].mean() + p_t2v[matched.T].mean()).item()
            if not cfg.mu_only:
                logs["sigma_img"] = uncertainty(img[1]).mean().item()
                logs["sigma_cap"] = uncertainty(cap[1]).mean().item()
        return total, logs

    @torch.no_grad()
    def score(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian, direction: Direction | None = None,
              *, chunk_size: int = DEFAULT_CHUNK) -> Tensor:
        """Test-time scores (n_img, n_cap), higher = closer: -d_m^2 of Eq. (4) with the query's covariance.

        "i2t": images are the queries, -d_m^2(image, caption mean); "t2i": captions are the queries,
        -d_m^2(caption, image mean), laid out (n_img, n_cap); "both": their mean. Default
        `config.test_direction` ("both"); see the module docstring. Candidates in blocks of `chunk_size`.
        """
        direction = direction or self.config.test_direction
        if direction not in DIRECTIONS:
            raise ValueError(f"MSRM.score: unknown direction {direction!r}; choose one of {DIRECTIONS}")
        img, cap = self.gaussian(img_emb), self.gaussian(cap_emb)
        if direction == "i2t":
            return -mahalanobis(img, cap[0], chunk_size=chunk_size)
        if direction == "t2i":
            return -mahalanobis(cap, img[0], chunk_size=chunk_size).T
        return 0.5 * (self.score(img_emb, cap_emb, "i2t", chunk_size=chunk_size)
                      + self.score(img_emb, cap_emb, "t2i", chunk_size=chunk_size))

    def score_direction(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian, direction: Direction,
                        *, chunk_size: int = DEFAULT_CHUNK) -> Tensor:
        """`score` for one retrieval direction ("i2t" or "t2i"), (n_img, n_cap): what `evaluate` ranks by."""
        if direction not in ("i2t", "t2i"):
            raise ValueError(f"MSRM.score_direction: direction must be 'i2t' or 't2i', got {direction!r}")
        return self.score(img_emb, cap_emb, direction, chunk_size=chunk_size)

    def batch_scores(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian) -> Tensor:
        """The training-time twin of `score` ("both"): -(d_m^2(image query) + d_m^2(caption query)^T) / 2 on a
        batch, (B, B), differentiable."""
        img, cap = self.gaussian(img_emb), self.gaussian(cap_emb)
        return -0.5 * (mahalanobis(img, cap[0]) + mahalanobis(cap, img[0]).T)
