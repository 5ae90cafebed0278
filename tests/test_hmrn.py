"""HMRN (xmr_core.methods.hmrn): each similarity level on hand-built inputs, the whole score against a float64
loop reference written here, one-round sets against single queries, no query dropped, chunked scoring, the
per-round averaging of a single-query model, gradients, the ensemble and one `fit` epoch on a multi-query split."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fixtures.corpora import synthetic_split

from xmr_core.data.datasets import caption_loader, image_loader, query_loader
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import evaluate_multi_query, gallery_ranks, multi_query_scores
from xmr_core.methods.hmrn import (
    HMRN,
    HMRNConfig,
    HMRNEnsemble,
    InterCorrelationStep,
    IntraCorrelation,
    SelfAttentionPool,
    clipped_cosines,
    hmrn_config,
    local_image_text,
    local_text_image,
    project_regions,
)
from xmr_core.methods.registry import create_method, list_methods
from xmr_core.runs.train import TrainConfig, fit

D = 8
ENCODERS = {"embed_dim": D, "image": ImageEncoderConfig(kind="regions", region_dim=4),
            "text": TextEncoderConfig(hidden=4)}
LN3 = math.log(3.0)  # e^λ = 3 keeps the hand-worked softmaxes rational


def _split(name: str, n: int, seed: int):
    """A synthetic split whose images hold 1, 2 or 3 region queries ("object q of image i")."""
    return synthetic_split(name, n, np.random.default_rng(seed))


TRAIN, VAL = _split("train", 8, 0), _split("val", 6, 1)
VOCAB = Vocabulary.build(TRAIN.captions + VAL.captions + [q for qs in TRAIN.queries + VAL.queries for q in qs])
VECTORS = np.random.default_rng(2).standard_normal((len(VOCAB), 5)).astype(np.float32)


def _model(**overrides: object) -> HMRN:
    torch.manual_seed(0)
    return HMRN(hmrn_config(ENCODERS, **overrides), VECTORS).eval()


def _unit(*rows: tuple[float, ...]) -> torch.Tensor:
    return F.normalize(torch.tensor(rows, dtype=torch.float64), dim=-1)


# ----------------------------------------------------------------------------- a hand-built image and set
# regions v1 = v3 = (1, 0), v2 = (0, 1), v4 padding; queries t1 = (1, 0), t2 = (0, -1), t3 absent.
# clipped cosines [s(v_i, t_j)]_+ as the paper prints them (max(s, 0), slope 0): v1: (1, 0), v2: (0, 0)
# (s(v2, t2) = -1 clipped), v3: (1, 0); with the code's LeakyReLU(0.1) (the default, choice 11) v2: (0, -0.1)
V = torch.cat([_unit((1, 0), (0, 1), (1, 0)), torch.zeros(1, 2, dtype=torch.float64)])[None]  # (1, 4, 2)
REGION_MASK = torch.tensor([[True, True, True, False]])
T = torch.cat([_unit((1, 0), (0, -1)), torch.zeros(1, 2, dtype=torch.float64)])[None]  # (1, 3, 2)
QUERY_MASK = torch.tensor([[True, True, False]])


def _pos(slope: float = 0.0) -> torch.Tensor:
    return clipped_cosines(V, REGION_MASK, T, QUERY_MASK, slope)


def test_clipped_cosines_by_hand():
    expected = torch.tensor([[1, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(_pos()[0, 0], expected)
    expected[1, 1] = -0.1  # LeakyReLU(0.1) of s(v2, t2) = -1; padding stays 0
    torch.testing.assert_close(_pos(0.1)[0, 0], expected)
    assert HMRNConfig().clip_slope == 0.1 and HMRNConfig(clip="relu").clip_slope == 0.0
    with pytest.raises(ValueError, match="unknown clip"):
        HMRNConfig(clip="abs")


def test_local_image_text_by_hand():
    # Eq. (3)-(5), λ1 = ln 3: v1 and v3 weigh their queries 3 : 1 -> 3/4 each; v2 matches nothing -> 0;
    # S_I-T = (3/4 + 0 + 3/4) / 3 = 1/2 (the padded region is not averaged)
    got = local_image_text(_pos(), REGION_MASK, QUERY_MASK, LN3)
    torch.testing.assert_close(got, torch.tensor([[0.5]], dtype=torch.float64))


def test_local_text_image_by_hand():
    # Eq. (6)-(8), λ2 = ln 3: t1 weighs v1, v2, v3 as 3 : 1 : 3 -> (3 + 0 + 3) / 7 = 6/7; t2 matches nothing
    # -> 0; S_T-I = (6/7 + 0) / 2 = 3/7 (the absent query is not averaged)
    got = local_text_image(_pos(), REGION_MASK, QUERY_MASK, LN3)
    torch.testing.assert_close(got, torch.tensor([[3 / 7]], dtype=torch.float64))


def test_leaky_local_levels_by_hand():
    # the leaky clip (slope 0.1): only s(v2, t2) changes, to -0.1. T-I, λ2 = ln 3: t1 as before, 6/7; t2 weighs
    # v1, v2, v3 as 1 : 3^-0.1 : 1 -> -0.1 · 3^-0.1 / (2 + 3^-0.1); S_T-I = the mean of the two.
    # I-T, λ1 = ln 3: v1, v3 as before, 3/4 each; v2 weighs t1, t2 as 1 : 3^-0.1 -> -0.1 · 3^-0.1 / (1 + 3^-0.1)
    w = 3 ** -0.1
    t_i = (6 / 7 - 0.1 * w / (2 + w)) / 2
    i_t = (3 / 4 + 3 / 4 - 0.1 * w / (1 + w)) / 3
    torch.testing.assert_close(local_text_image(_pos(0.1), REGION_MASK, QUERY_MASK, LN3),
                               torch.tensor([[t_i]], dtype=torch.float64))
    torch.testing.assert_close(local_image_text(_pos(0.1), REGION_MASK, QUERY_MASK, LN3),
                               torch.tensor([[i_t]], dtype=torch.float64))


def test_one_query_local_levels_reduce_to_plain_cosines():
    # with one query the I-T softmax has a single entry: S_I-T = the mean clipped cosine over the regions
    t = _unit((0.6, 0.8))[None]
    mask = torch.tensor([[True]])
    pos = clipped_cosines(V, REGION_MASK, t, mask, 0.1)
    torch.testing.assert_close(local_image_text(pos, REGION_MASK, mask, 5.0),
                               torch.tensor([[(0.6 + 0.8 + 0.6) / 3]], dtype=torch.float64))


def test_global_pooling_by_hand():
    # Eq. (9)-(10) with W_ave = W_r = I and W_s = (1, 1): logits x_ave · x_i; x = (1, 0), (1, 0), (0, 1) and a
    # padded (5, 5); x_ave = (2/3, 1/3), logits (2/3, 2/3, 1/3) -> weights ∝ (e^{2/3}, e^{2/3}, e^{1/3});
    # Σ w x ∝ (2 e^{1/3}, 1) after dividing by e^{1/3}
    pool = SelfAttentionPool(2).double()
    with torch.no_grad():
        pool.w_ave.weight.copy_(torch.eye(2))
        pool.w_r.weight.copy_(torch.eye(2))
        pool.w_s.weight.fill_(1.0)
    x = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    e = math.exp(1 / 3)
    torch.testing.assert_close(pool(x, mask), torch.tensor([[2 * e, 1.0]], dtype=torch.float64) / math.hypot(2 * e, 1))
    # S_G (Eq. 11) is then the dot product of the two unit vectors


def test_projected_regions_by_hand():
    # Eq. (12)-(13), λ2 = ln 3: s̃ normalises each region's row over the queries: v1, v3 -> (1, 0), v2 -> (0, 0);
    # t1 weighs v1, v2, v3 as 3 : 1 : 3 -> v1^p = (6/7, 1/7); t2 sees s̃ = 0 everywhere -> uniform -> (2/3, 1/3)
    got = project_regions(_pos(), V, REGION_MASK, LN3)[0, 0]
    torch.testing.assert_close(got[:2], torch.tensor([[6 / 7, 1 / 7], [2 / 3, 1 / 3]], dtype=torch.float64))


def test_intra_correlation_by_hand():
    # Eq. (14) with W_c = I: norm(|V - T|²); V = (1, 0), T = (0, 2) -> (1, 4) / sqrt(17)
    intra = IntraCorrelation(2).double()
    with torch.no_grad():
        intra.w_c.weight.copy_(torch.eye(2))
    visual, textual = torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    torch.testing.assert_close(intra(visual, textual), torch.tensor([[1.0, 4.0]], dtype=torch.float64) / math.sqrt(17))
    concat = IntraCorrelation(2, "concat").double()  # Table 7: W_c [V ; T] with W_c = [I I] -> norm(V + T)
    with torch.no_grad():
        concat.w_c.weight.copy_(torch.cat([torch.eye(2), torch.eye(2)], 1))
    torch.testing.assert_close(concat(visual, textual), torch.tensor([[1.0, 2.0]], dtype=torch.float64) / math.sqrt(5))


def test_inter_correlation_step_by_hand():
    # Eq. (15)-(16) with W_q = W_k = W_R = I: nodes c1 = (1, 0), c2 = (0, 1) and a padded node (5, 5) that is
    # no source. A[q, k] = softmax over q of c_q · c_k: column k puts e/(e+1) on q = k and 1/(e+1) on the other;
    # c1' = (e, 1)/(e+1), c2' = (1, e)/(e+1) (ReLU keeps them)
    step = InterCorrelationStep(2).double()
    with torch.no_grad():
        for w in (step.w_q, step.w_k, step.w_r):
            w.weight.copy_(torch.eye(2))
    c = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], dtype=torch.float64)
    out = step(c, torch.tensor([True, True, False]))
    e = math.e
    torch.testing.assert_close(out[:2], torch.tensor([[e, 1.0], [1.0, e]], dtype=torch.float64) / (e + 1))


# ----------------------------------------------------------------------------- the whole score, by loops
def _softmax(x: list[float]) -> list[float]:
    m = max(x)
    z = [math.exp(v - m) for v in x]
    return [v / sum(z) for v in z]


def _pool_ref(xs: list[torch.Tensor], pool: SelfAttentionPool) -> torch.Tensor:
    ave = sum(xs) / len(xs)
    logits = [float(pool.w_s.weight[0] @ ((pool.w_ave.weight @ ave) * (pool.w_r.weight @ x))) for x in xs]
    g = sum(w * x for w, x in zip(_softmax(logits), xs))
    return g / g.norm()


def reference_levels(model: HMRN, img, queries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every level of every image x set, one pair and one region / query at a time, float64."""
    cfg = model.config
    v, region_mask, _ = img
    t, query_mask = queries
    out = np.zeros((3, len(v), len(t)))
    for i in range(len(v)):
        regions = [v[i, k] for k in range(v.shape[1]) if region_mask[i, k]]
        v_glo = _pool_ref(regions, model.image_pool)
        for q in range(len(t)):
            ts = [t[q, n] for n in range(t.shape[1]) if query_mask[q, n]]
            s = [[float(r @ x) for x in ts] for r in regions]  # [region][query]
            s = [[x if x > 0 else cfg.clip_slope * x for x in row] for row in s]  # [s]_+ (choice 11)
            if cfg.local == "I-T":
                local = np.mean([sum(a * x for a, x in zip(_softmax([cfg.lambda1 * x for x in row]), row))
                                 for row in s])
            else:
                cols = [[s[k][j] for k in range(len(regions))] for j in range(len(ts))]
                local = np.mean([sum(a * x for a, x in zip(_softmax([cfg.lambda2 * x for x in col]), col))
                                 for col in cols])
            t_glo = _pool_ref(ts, model.query_pool)
            norms = [math.sqrt(sum(x * x for x in row)) + 1e-8 for row in s]
            v_p = []
            for j in range(len(ts)):
                alpha = _softmax([cfg.lambda2 * s[k][j] / norms[k] for k in range(len(regions))])
                v_p.append(sum(a * r for a, r in zip(alpha, regions)))
            nodes = []
            for vis, txt in zip(v_p + [v_glo], ts + [t_glo]):
                c = model.intra.w_c.weight @ (vis - txt) ** 2
                nodes.append(c / c.norm())
            for step in model.inter:
                new = []
                for k in range(len(nodes)):
                    a = _softmax([float((step.w_q.weight @ nodes[p]) @ (step.w_k.weight @ nodes[k]))
                                  for p in range(len(nodes))])
                    new.append(torch.relu(step.w_r.weight @ sum(w * c for w, c in zip(a, nodes))))
                nodes = new
            logit = float(model.reasoning_fc.weight[0] @ nodes[-1] + model.reasoning_fc.bias[0])
            out[:, i, q] = local, float(v_glo @ t_glo), 1 / (1 + math.exp(-logit))
    return out[0], out[1], out[2]


def _random_embeddings(model: HMRN, seed: int = 0):
    """3 images of 4 region slots (4, 2, 3 real) and 3 sets of 3 query slots (3, 1, 2 real), float64."""
    g = torch.Generator().manual_seed(seed)
    region_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    query_mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    v = F.normalize(torch.randn(3, 4, D, generator=g, dtype=torch.float64), dim=-1).masked_fill(~region_mask[..., None], 0)
    t = F.normalize(torch.randn(3, 3, D, generator=g, dtype=torch.float64), dim=-1).masked_fill(~query_mask[..., None], 0)
    return (v, region_mask, model.image_pool(v, region_mask)), (t, query_mask)


@pytest.mark.parametrize("clip", ["leaky", "relu"])
@pytest.mark.parametrize("local", ["I-T", "T-I"])
def test_every_level_against_a_loop_reference(local, clip):
    model = _model(local=local, clip=clip).double()
    img, queries = _random_embeddings(model)
    with torch.no_grad():
        levels = model.levels(img, queries)
        expected = reference_levels(model, img, queries)
        for got, want in zip(levels, expected):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
        w = model.config.level_weights()  # Eq. (18)-(19)
        want_score = w["local"] * expected[0] + w["global"] * expected[1] + w["reasoning"] * expected[2]
        np.testing.assert_allclose(model.score(img, queries).numpy(), want_score, rtol=1e-10, atol=1e-12)


def test_a_level_of_weight_zero_is_not_computed_and_the_others_are_unchanged():
    full = _model(alpha=0.5, beta=0.5).double()
    local_only = _model(alpha=1.0, beta=0.0).double()
    img, queries = _random_embeddings(full)
    with torch.no_grad():
        a, b = full.levels(img, queries), local_only.levels(img, queries)
    torch.testing.assert_close(a.local, b.local)
    assert not b.global_.any() and not b.reasoning.any()
    assert full.config.level_weights() == {"local": 0.5, "global": 0.0, "reasoning": 0.5}


@pytest.mark.parametrize("local", ["I-T", "T-I"])
def test_local_scores_do_not_die_when_every_cosine_is_negative(local):
    # Table 6's local-only rows (α = 1, β = 0) with every region-query cosine negative (regions near e_1, queries
    # near -e_1: the state one Adam step put the cpu profile's S_T-I in). The paper's max(s, 0) makes every
    # score exactly 0 with no gradient (a dead ReLU: training cannot leave it); the leaky clip keeps the scores
    # apart and the gradient alive.
    g = torch.Generator().manual_seed(0)
    base = torch.zeros(D, dtype=torch.float64)
    base[0] = 1.0
    v = F.normalize(base + 0.15 * torch.randn(3, 4, D, generator=g, dtype=torch.float64), dim=-1)
    t = F.normalize(-base + 0.15 * torch.randn(3, 2, D, generator=g, dtype=torch.float64), dim=-1)
    assert (torch.einsum("ikd,qnd->iqkn", v, t) < 0).all()
    batch = {"image_index": torch.arange(3)}
    for clip, alive in (("leaky", True), ("relu", False)):
        model = _model(local=local, alpha=1.0, beta=0.0, clip=clip).double()
        v_, t_ = v.clone().requires_grad_(), t.clone().requires_grad_()
        img, queries = (v_, torch.ones(3, 4, dtype=torch.bool), None), (t_, torch.ones(3, 2, dtype=torch.bool))
        scores = model.score(img, queries)
        model.loss(img, queries, batch)[0].backward()
        assert (scores.std() > 1e-4) == alive, (clip, scores)
        assert (v_.grad.abs().max() > 1e-4 and t_.grad.abs().max() > 1e-4) == alive, clip


def test_eq12_gradient_is_finite_for_a_region_that_matches_no_query():
    # with max(s, 0), region -e_1 of image 0 matches no query of set 0 (its one query is e_1): its row of Eq. (12)
    # is s̃ = 0 / (0 + ε), whose gradient must be finite (sqrt(Σ s²) at 0 gave NaN, and NaN weights after a step)
    e = torch.eye(D, dtype=torch.float64)
    v = torch.stack([torch.stack([-e[0], e[1]]), torch.stack([e[0], e[2]])]).requires_grad_()  # (2 images, 2, D)
    t = torch.stack([e[:1], e[1:2]]).requires_grad_()  # (2 sets, 1 query, D)
    model = _model(clip="relu").double()
    region_mask, query_mask = torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 1, dtype=torch.bool)
    assert not clipped_cosines(v, region_mask, t, query_mask, 0.0)[0, 0, 0].any()
    model.score((v, region_mask, model.image_pool(v, region_mask)), (t, query_mask)).sum().backward()
    assert torch.isfinite(v.grad).all() and torch.isfinite(t.grad).all()


def test_a_few_adam_steps_keep_the_local_scores_apart():
    # S_T-I (α = 1) from five initialisations on regions with a common direction (non-negative features, as the
    # scenes region encoder's): after 5 Adam steps no model scores every pair alike (with max(s, 0) seed 4 did:
    # every cosine negative, every score 0)
    train = dataclasses.replace(TRAIN, regions=np.abs(TRAIN.regions) + 1.0)
    batch = next(iter(query_loader(train, VOCAB, 8, visual="regions")))
    for seed in range(5):
        torch.manual_seed(seed)
        model = HMRN(hmrn_config(ENCODERS, local="T-I", alpha=1.0, beta=0.0, tau=80.0), VECTORS)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(5):
            optimizer.zero_grad()
            model.loss(*model(batch), batch)[0].backward()
            optimizer.step()
        with torch.no_grad():
            assert model.score(*model(batch)).std() > 1e-4, seed


def test_padding_never_changes_a_score():
    # a set scored with extra absent slots, and an image with extra padded regions, score as they are alone
    model = _model().double()
    img, queries = _random_embeddings(model)
    with torch.no_grad():
        full = model.score(img, queries)
        short = model.score(img, (queries[0][1:2, :1], queries[1][1:2, :1]))  # set 1 (one query) without padding
        torch.testing.assert_close(short[:, 0], full[:, 1])
        image_1 = (img[0][1:2, :2], img[1][1:2, :2], img[2][1:2])  # image 1 (two regions) without padding
        torch.testing.assert_close(model.score(image_1, queries)[0], full[1])


# ----------------------------------------------------------------------------- encoders
def test_query_encoder_is_eq2_at_the_last_word():
    # hidden == D: t_j = h_M = (forward state + backward state at the last word) / 2, unit; reference: the GRU run
    # on each query alone, without packing or padding
    model = _model(text=TextEncoderConfig(hidden=D))
    lengths = torch.tensor([[4, 2, 3], [1, 0, 0]])  # queries of 4, 2, 3 and 1 words; padding past them
    tokens = torch.randint(2, len(VOCAB), (2, 3, 4), generator=torch.Generator().manual_seed(0))
    tokens[torch.arange(4)[None, None, :] >= lengths[..., None]] = 0
    batch = {"query_tokens": tokens, "query_lengths": lengths, "query_mask": lengths > 0,
             "image_index": torch.arange(2)}
    with torch.no_grad():
        t, mask = model.encode_queries(batch)
        enc = model.text_encoder
        for b, n in zip(*mask.nonzero(as_tuple=True)):
            length = int(batch["query_lengths"][b, n])
            out, _ = enc.rnn(enc.embed(batch["query_tokens"][b, n, :length])[None])
            h_m = (out[0, -1, :D] + out[0, -1, D:]) / 2
            torch.testing.assert_close(t[b, n], F.normalize(h_m, dim=-1))
    assert not t[~mask].any()  # absent queries are zero vectors


def test_a_one_round_set_scores_as_the_single_query():
    model = _model()
    img = model.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
    with torch.no_grad():
        sets = model.encode_queries(next(iter(query_loader(VAL, VOCAB, 6, visual=None, max_queries=1))))
        first = [qs[0] for qs in VAL.queries]
        single = dataclasses.replace(VAL, captions=first, caption_ids=[f"q{i}" for i in range(VAL.n_images)],
                                     caption_image=np.arange(VAL.n_images), caption_level=None, exact=None)
        caps = model.encode_captions(next(iter(caption_loader(single, VOCAB, 6))))
        torch.testing.assert_close(model.score(img, sets), model.score(img, caps))
        torch.testing.assert_close(multi_query_scores(model, VAL, VOCAB, 1)[0], model.score(img, caps).T)


# ----------------------------------------------------------------------------- no query dropped
def test_a_set_longer_than_max_queries_is_an_error_naming_its_image():
    model = _model(max_queries=2)
    batch = next(iter(query_loader(VAL, VOCAB, 6, visual=None)))  # image 2 has 3 queries
    with pytest.raises(ValueError, match="image 2 has a set of 3 queries"):
        model.encode_queries(batch)
    with pytest.raises(ValueError, match="3 rounds: hmrn scores sets of at most max_queries=2"):
        multi_query_scores(model, VAL, VOCAB, 3)


def test_every_query_counts_and_short_sets_are_an_error_or_held():
    model = _model()
    with pytest.raises(ValueError, match="image 'val_000' has 1 region queries, fewer than 2 rounds"):
        multi_query_scores(model, VAL, VOCAB, 2)
    scores = multi_query_scores(model, VAL, VOCAB, 3, short="hold")  # sets of 1, 2, 3, 1, 2, 3 queries
    counts = [len(q) for q in VAL.queries]
    for q, n in enumerate(counts):
        for r in range(2, 4):  # a new query changes the set's scores; a finished set keeps its last round's
            changed = not torch.equal(scores[r - 1, q], scores[r - 2, q])
            assert changed == (r <= n), (q, r)


def test_chunked_scoring_equals_unchunked():
    model = _model()
    whole = multi_query_scores(model, VAL, VOCAB, 3, short="hold", chunk_size=100, query_chunk=100)
    torch.testing.assert_close(multi_query_scores(model, VAL, VOCAB, 3, short="hold", chunk_size=2, query_chunk=4),
                               whole)
    assert whole.shape == (3, VAL.n_images, VAL.n_images)


def test_single_query_baseline_averages_the_rounds_so_far():
    # the paper's "*" rows: a single-query model scores each query alone; round r = the mean of the first r
    vse = create_method("vse", VECTORS, embed_dim=D, image=ImageEncoderConfig(kind="regions", region_dim=4),
                        text=TextEncoderConfig(hidden=4)).eval()
    got = multi_query_scores(vse, VAL, VOCAB, 3, short="hold", chunk_size=4, query_chunk=2)
    img = vse.encode_images(next(iter(image_loader(VAL, 6, visual="regions"))))
    with torch.no_grad():
        for q, queries in enumerate(VAL.queries):
            alone = []
            for text in queries:
                tokens = torch.tensor([VOCAB.encode(text)])
                caption = vse.encode_captions({"tokens": tokens, "lengths": torch.tensor([tokens.shape[1]])})
                alone.append(vse.score(img, caption)[:, 0])
            for r in range(1, 4):
                used = alone[:r]
                torch.testing.assert_close(got[r - 1, q], sum(used) / len(used))


def test_gallery_ranks_by_hand():
    # one query's scores of 4 images: 0.5, 0.9, 0.5, 0.1 -> ranks 3, 1, 3, 4 (a tie takes the lower place)
    scores = torch.tensor([[0.5, 1.0], [0.9, 2.0], [0.5, 3.0], [0.1, 4.0]])
    torch.testing.assert_close(gallery_ranks(scores), torch.tensor([[3.0, 4.0], [1.0, 3.0], [3.0, 2.0], [4.0, 1.0]]))


def test_rank_fusion_averages_the_ranks_so_far():
    # Drill-down's R-RankFusion: round r ranks the images by the mean of the first r queries' ranks of them
    vse = create_method("vse", VECTORS, **ENCODERS).eval()
    scores = multi_query_scores(vse, VAL, VOCAB, 2, short="hold")  # round 2 = mean score of queries 1, 2
    fused = multi_query_scores(vse, VAL, VOCAB, 2, short="hold", fusion="ranks")
    alone_1 = scores[0]  # (Q, G): each set's first query alone
    alone_2 = 2 * scores[1] - scores[0]  # its second query alone (for the sets that have one)
    for q, queries in enumerate(VAL.queries):
        rank_1 = gallery_ranks(alone_1[q][:, None])[:, 0]
        torch.testing.assert_close(fused[0, q], -rank_1)
        if len(queries) > 1:
            rank_2 = gallery_ranks(alone_2[q][:, None])[:, 0]
            torch.testing.assert_close(fused[1, q], -(rank_1 + rank_2) / 2)
    with pytest.raises(ValueError, match="fusion must be"):
        multi_query_scores(_model(), VAL, VOCAB, 1, fusion="ranks")


@pytest.mark.parametrize("name", [n for n in list_methods() if n != "hmrn"])
def test_every_method_scores_query_sets_in_blocks_or_whole_alike(name):
    # single-query methods (the '*' protocol), the single-vector set encoders (R-RE, R-HRE) and Drill-down's state
    # tracker: embeddings of any layout (tuples, sub-embeddings) go through, in blocks or whole alike
    torch.manual_seed(0)
    model = create_method(name, VECTORS, **ENCODERS, **({"heads": 2} if name == "hrem" else {})).eval()
    whole = multi_query_scores(model, VAL, VOCAB, 3, short="hold", chunk_size=100, query_chunk=100)
    assert whole.shape == (3, VAL.n_images, VAL.n_images) and torch.isfinite(whole).all()
    torch.testing.assert_close(multi_query_scores(model, VAL, VOCAB, 3, short="hold", chunk_size=2, query_chunk=3),
                               whole, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- training
@pytest.mark.parametrize("local", ["I-T", "T-I", "joint"])
def test_gradients_reach_every_parameter(local):
    model = _model(local=local).train()
    batch = next(iter(query_loader(TRAIN, VOCAB, 8, train=True, visual="regions")))
    loss, logs = model.loss(*model(batch), batch)
    loss.backward()
    assert set(logs) == {"nce_local", "nce_global", "nce_reasoning"} | ({"nce_local_ti"} if local == "joint" else set())
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    # t_j = h_M (Eq. 2): the backward half of h_M is one GRU step from the zero initial state, so the backward
    # direction's recurrent weights multiply 0 and get no gradient (its bias b_hh still does)
    assert missing == ["text_encoder.rnn.weight_hh_l0_reverse"]


def test_loss_is_eq21_of_eq20_per_level():
    model = _model()
    img, queries = _random_embeddings(model.double())
    batch = {"image_index": torch.arange(3)}
    loss, logs = model.loss(img, queries, batch)
    levels = model.levels(img, queries)
    tau, total = model.config.tau, 0.0
    weighted = (("local", levels.local, 0.4), ("global", levels.global_, 0.2), ("reasoning", levels.reasoning, 0.4))
    for name, s, w in weighted:
        s = s.detach().numpy()  # Eq. (20): -(1/n) Σ_g [log softmax over the sets + log softmax over the images]
        row = sum(-(tau * s[g, g] - np.log(np.exp(tau * s[g]).sum())) for g in range(3)) / 3
        col = sum(-(tau * s[g, g] - np.log(np.exp(tau * s[:, g]).sum())) for g in range(3)) / 3
        assert logs[f"nce_{name}"] == pytest.approx(row + col, rel=1e-9)
        total += w * (row + col)
    assert loss.item() == pytest.approx(total, rel=1e-9)


def test_ensemble_is_the_sum_of_the_two_models():
    it, ti = _model(local="I-T"), _model(local="T-I", lambda2=10.0)
    ensemble = HMRNEnsemble(it, ti)
    got = multi_query_scores(ensemble, VAL, VOCAB, 2, short="hold")
    torch.testing.assert_close(got, multi_query_scores(it, VAL, VOCAB, 2, short="hold")
                               + multi_query_scores(ti, VAL, VOCAB, 2, short="hold"))
    with pytest.raises(ValueError, match="an HMRN I-T and an HMRN T-I"):
        HMRNEnsemble(ti, it)


def test_joint_model_is_the_two_models_on_one_network():
    """Table 9's "Joint": with the same weights, its score is S_1 + S_2 (Eq. 17) of an HMRN I-T and an HMRN T-I and
    its loss the sum of their Eq. (21) losses."""
    joint = _model(local="joint").double()
    it, ti = _model(local="I-T").double(), _model(local="T-I").double()
    it.load_state_dict(joint.state_dict())
    ti.load_state_dict(joint.state_dict())
    img, queries = _random_embeddings(joint)
    with torch.no_grad():
        torch.testing.assert_close(joint.score(img, queries), it.score(img, queries) + ti.score(img, queries))
        batch = {"image_index": torch.tensor([0, 1, 0])}  # sets 0 and 2 share an image: not negatives
        loss, logs = joint.loss(img, queries, batch)
        (loss_it, logs_it), (loss_ti, logs_ti) = it.loss(img, queries, batch), ti.loss(img, queries, batch)
    assert loss.item() == pytest.approx(loss_it.item() + loss_ti.item(), rel=1e-12)
    assert logs["nce_local"] == pytest.approx(logs_it["nce_local"]) and \
        logs["nce_local_ti"] == pytest.approx(logs_ti["nce_local"])
    with pytest.raises(ValueError, match="local must be"):
        _model(local="both")


def test_one_fit_epoch_on_a_multi_query_split(tmp_path):
    model = _model(max_queries=2)  # training draws 2 of an image's up to 3 queries
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(epochs=1, batch_size=4, device="cpu", progress=False, seed=0)
    result = fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB)
    row = result.history[0]
    assert {"train/nce_local", "val/round2/R@1", "val/mean/meanR", "val/rsum"} <= set(row)
    assert "val/round3/R@1" not in row  # validated on rounds 1..max_queries
    assert row["val/rsum"] == pytest.approx(sum(row[f"val/mean/R@{k}"] for k in (1, 5, 10)))
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    again = _model(max_queries=2)  # deterministic on CPU: the same batches, query draws and weights
    fit(again, TRAIN, VAL, cfg, tmp_path / "again", vocab=VOCAB)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="epoch_mode must be 'one_per_image'"):
        fit(_model(), TRAIN, VAL, dataclasses.replace(cfg, epoch_mode="all_captions"), tmp_path / "other", vocab=VOCAB)


def test_evaluate_multi_query_keys_and_config_checks():
    out = evaluate_multi_query(_model(), VAL, VOCAB, 2, short="hold", ks=(1, 3))
    assert {"round1/R@3", "round2/meanR", "mean/R@10", "rsum"} <= set(out)
    with pytest.raises(ValueError, match="alpha \\+ beta <= 1"):
        HMRNConfig(alpha=0.7, beta=0.4)
    assert create_method("hmrn", VECTORS, **ENCODERS).task == "multi_query"


def test_the_last_reasoning_step_updates_the_global_node_as_the_full_step_does() -> None:
    """`InterCorrelationStep.global_node` is `forward(...)[..., -1, :]`: only c*_glo leaves the last step."""
    from xmr_core.methods.hmrn import InterCorrelationStep

    torch.manual_seed(0)
    step = InterCorrelationStep(8)
    c = F.normalize(torch.randn(3, 4, 6, 8), dim=-1)
    mask = torch.ones(1, 4, 6, dtype=torch.bool)
    mask[0, 1, 2:5] = False  # a set of two queries (its global node stays real)
    torch.testing.assert_close(step.global_node(c, mask), step(c, mask)[..., -1, :], atol=1e-6, rtol=1e-5)
