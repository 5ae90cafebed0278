"""xmr_core.ceiling against a hand-worked split and a brute-force enumeration of the tie-breaking orders."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from xmr_core.ceiling import (
    bayes_ceiling,
    ceiling_i2t,
    ceiling_t2i,
    fold_ceiling,
    multi_round_ceiling,
    percent_of_ceiling,
    query_ceiling,
    split_ceiling,
)
from xmr_core.data.corpus import Split


def make_split(exact: np.ndarray | None, caption_image: list[int], n_images: int) -> Split:
    m = len(caption_image)
    return Split(
        name="test", source="tiny/source.json",
        image_ids=[f"img{i}" for i in range(n_images)], caption_ids=[f"cap{j}" for j in range(m)],
        captions=[f"caption {j}" for j in range(m)], caption_image=np.array(caption_image, dtype=np.int64),
        exact=exact,
    ).validate()


# 4 images, 2 captions each; the images each caption holds in, and its n_m:
HOLDS = [
    {0, 1},        # c0 (image 0)  n=2
    {0, 1, 2},     # c1 (image 0)  n=3
    {0, 1},        # c2 (image 1)  n=2
    {1, 3},        # c3 (image 1)  n=2
    {0, 2},        # c4 (image 2)  n=2
    {0, 1, 2},     # c5 (image 2)  n=3
    {0, 2, 3},     # c6 (image 3)  n=3
    {0, 1, 2, 3},  # c7 (image 3)  n=4
]
OWNER = [0, 0, 1, 1, 2, 2, 3, 3]


def tiny_split() -> Split:
    exact = np.array([[i in holds for i in range(4)] for holds in HOLDS])
    return make_split(exact, OWNER, 4)


def test_hand_worked_split():
    # t2i: n_m = 2, 3, 2, 2, 2, 3, 3, 4
    #   R@1 = mean(1/n_m)         = (4·1/2 + 3·1/3 + 1/4) / 8 = 3.25 / 8 = 0.40625
    #   R@2 = mean(min(1, 2/n_m)) = (4·1 + 3·2/3 + 1/2) / 8   = 6.5 / 8  = 0.8125
    # i2t, candidates of each image grouped by n_m (own captions starred):
    #   image 0: n=2 {c0*, c2, c4}, n=3 {c1*, c5, c6}, n=4 {c7}
    #     R@1: r=1 in a group of 3 with 1 own: 1 - C(2,1)/C(3,1) = 1/3
    #     R@2: r=2 in the same group:          1 - C(2,2)/C(3,2) = 2/3
    #   image 1: n=2 {c0, c2*, c3*}, n=3 {c1, c5}, n=4 {c7}
    #     R@1: 1 - C(1,1)/C(3,1) = 2/3;  R@2: 1 - C(1,2)/C(3,2) = 1
    #   image 2: n=2 {c4*}, ...   -> R@1 = R@2 = 1 (the first group fits and holds an own caption)
    #   image 3: n=2 {c3}, n=3 {c6*}, n=4 {c7*}
    #     R@1: {c3} fills the one slot, no own caption -> 0;  R@2: c3 then c6* -> 1
    #   R@1 = (1/3 + 2/3 + 1 + 0) / 4 = 1/2;  R@2 = (2/3 + 1 + 1 + 1) / 4 = 11/12
    got = bayes_ceiling(tiny_split(), ks=(1, 2))
    expected = {"i2t/R@1": 50.0, "i2t/R@2": 1100 / 12, "t2i/R@1": 40.625, "t2i/R@2": 81.25}
    assert got.keys() == expected.keys()  # no rsum without K = 1, 5, 10
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def brute_i2t_hits(exact: np.ndarray, caption_image: np.ndarray, ks) -> np.ndarray:
    """(N, len(ks)): per image, the fraction of tie-breaking orders (all orders within every group of equally
    specific candidates) that put an own caption in the top K."""
    n_pos = exact.sum(1)
    per_image = []
    for i in range(exact.shape[1]):
        cand = np.flatnonzero(exact[:, i])
        groups = [[c for c in cand if n_pos[c] == n] for n in sorted(set(n_pos[cand]))]
        within = itertools.product(*[itertools.permutations(g) for g in groups])  # an order per group
        orders = [list(itertools.chain(*parts)) for parts in within]
        per_image.append([np.mean([any(caption_image[c] == i for c in o[:k]) for o in orders]) for k in ks])
    return np.array(per_image)


def brute_t2i_hits(exact: np.ndarray, caption_image: np.ndarray, ks) -> np.ndarray:
    """(M, len(ks)): per caption, the fraction of orders of its exact positives that put its own image in the top K."""
    per_caption = []
    for m in range(exact.shape[0]):
        orders = list(itertools.permutations(np.flatnonzero(exact[m])))
        per_caption.append([np.mean([caption_image[m] in o[:k] for o in orders]) for k in ks])
    return np.array(per_caption)


def brute_i2t(exact: np.ndarray, caption_image: np.ndarray, ks) -> dict[str, float]:
    return {f"R@{k}": 100 * v for k, v in zip(ks, brute_i2t_hits(exact, caption_image, ks).mean(0))}


def brute_t2i(exact: np.ndarray, caption_image: np.ndarray, ks) -> dict[str, float]:
    return {f"R@{k}": 100 * v for k, v in zip(ks, brute_t2i_hits(exact, caption_image, ks).mean(0))}


def test_query_ceiling_is_each_query_s_brute_force_hit_probability():
    rng = np.random.default_rng(5)
    caption_image = np.repeat(np.arange(6), 3)
    exact = rng.random((18, 6)) < 0.3
    exact[np.arange(18), caption_image] = True
    ks = (1, 2, 5)
    got = query_ceiling(make_split(exact, caption_image.tolist(), 6), ks)
    np.testing.assert_allclose(got["i2t"], brute_i2t_hits(exact, caption_image, ks), atol=1e-12)
    np.testing.assert_allclose(got["t2i"], brute_t2i_hits(exact, caption_image, ks), atol=1e-12)
    with pytest.raises(ValueError, match="no exact relevance"):
        query_ceiling(make_split(None, caption_image.tolist(), 6))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_brute_force(seed: int):
    rng = np.random.default_rng(seed)
    caption_image = np.repeat(np.arange(6), 3)  # 6 images, 3 captions each
    exact = rng.random((18, 6)) < 0.3
    exact[np.arange(18), caption_image] = True
    ks = (1, 2, 3, 5)
    for got, ref in (
        (ceiling_i2t(exact, caption_image, ks), brute_i2t(exact, caption_image, ks)),
        (ceiling_t2i(exact, ks), brute_t2i(exact, caption_image, ks)),
    ):
        assert got.keys() == ref.keys()
        for key in ref:
            assert got[key] == pytest.approx(ref[key], abs=1e-9), key


def test_large_group_product_form():
    # all 20,000 captions hold in both images, so each image sees one group of 20,000 equally specific captions.
    # image 0 owns 1 of them:      R@10 = 1 - C(19999, 10) / C(20000, 10)  (= 10/20000)
    # image 1 owns the other 19,999: R@10 = 1 - C(1, 10) / C(20000, 10) = 1
    caption_image = np.array([0] + [1] * 19_999)
    exact = np.ones((20_000, 2), dtype=bool)
    image0 = 1 - math.comb(19_999, 10) / math.comb(20_000, 10)
    image1 = 1 - math.comb(1, 10) / math.comb(20_000, 10)
    got = ceiling_i2t(exact, caption_image, ks=(10,))
    assert got["R@10"] == pytest.approx(100 * (image0 + image1) / 2, rel=1e-12)


def test_missing_exact_raises():
    split = make_split(None, OWNER, 4)
    with pytest.raises(ValueError, match="tiny/source.json"):
        bayes_ceiling(split)


def test_own_caption_must_hold():
    exact = np.array([[True, False], [True, True]])  # caption 0, written for image 1, does not hold there
    with pytest.raises(ValueError, match="caption 0"):
        ceiling_i2t(exact, np.array([1, 1]), ks=(1,))


def test_rsum_and_percent_of_ceiling():
    got = bayes_ceiling(tiny_split())
    six = [got[f"{d}/R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)]
    assert got["rsum"] == pytest.approx(sum(six))
    assert percent_of_ceiling(45.0, 90.0) == pytest.approx(50.0)
    assert percent_of_ceiling(0.0, 12.5) == 0.0
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="positive"):
            percent_of_ceiling(10.0, bad)


def test_fold_ceiling_one_fold_is_the_whole_split_and_smaller_galleries_do_not_lower_it() -> None:
    rng = np.random.default_rng(3)
    n_img, per = 20, 2
    caption_image = np.repeat(np.arange(n_img), per)
    exact = rng.random((n_img * per, n_img)) < 0.3
    exact[np.arange(n_img * per), caption_image] = True
    split = Split(name="folds", source="folds/source.json", image_ids=[f"i{i}" for i in range(n_img)],
                  caption_ids=[f"c{m}" for m in range(n_img * per)], captions=["x"] * (n_img * per),
                  caption_image=caption_image, exact=exact).validate()
    whole = bayes_ceiling(split)
    assert fold_ceiling(split, n_folds=1) == pytest.approx(whole)
    # a fold's gallery is a subset of the whole gallery: no caption gains positives, so t2i cannot fall
    folds = fold_ceiling(split, n_folds=4)
    for k in (1, 5, 10):
        assert folds[f"t2i/R@{k}"] >= whole[f"t2i/R@{k}"] - 1e-9


def test_split_ceiling_is_perfect_when_every_caption_holds_only_in_its_own_image() -> None:
    caption_image = [i for i in range(10) for _ in range(2)]
    own = np.arange(10)[None, :] == np.array(caption_image)[:, None]
    assert split_ceiling(make_split(None, caption_image, 10), "5K") is None  # no exact relevance: no ceiling
    ceiling = split_ceiling(make_split(own, caption_image, 10), "all")
    assert list(ceiling) == ["1K", "all"]
    for values in ceiling.values():  # a perfect scorer: R@1 = 100 both ways, rSum = 6 x 100
        assert values["rsum"] == pytest.approx(600.0) and values["i2t/R@1"] == pytest.approx(100.0)


# ------------------------------------------------------------------------------------- multi-round


# two attributes (shape, colour); -1 = a query leaves it open; objects padded to K = 3 slots
CIRCLE, SQUARE, RED, BLUE, ANY = 0, 1, 0, 1, -1
OBJECTS = np.array([[[CIRCLE, RED], [SQUARE, RED], [0, 0]],  # image 0: 2 objects
                    [[CIRCLE, RED], [CIRCLE, BLUE], [SQUARE, BLUE]],  # image 1: 3 objects
                    [[CIRCLE, RED], [0, 0], [0, 0]]])  # image 2: 1 object
VALID = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]], bool)
QUERIES = [np.array([[CIRCLE, ANY], [ANY, RED]]),  # set 0, for image 0: "a circle", "a red shape"
           np.array([[ANY, BLUE], [SQUARE, ANY]]),  # set 1: "a blue shape", "a square"
           np.array([[ANY, RED]])]  # set 2: one query, held in round 2


def test_multi_round_ceiling_hand_worked():
    # P(x_1..m | g) ∝ #injective matchings of the queries to g's objects · (k_g - m)! / k_g!
    # set 0, round 1 ("a circle"): image 0 1/2, image 1 2/3, image 2 1/1 -> target third: R@1 0, R@2 0, rank 3
    #        round 2 (+ "a red shape", another object): image 0 1 matching · 0!/2! = 1/2; image 1: circle = the
    #        blue circle, red = the red circle: 1 · 1!/3! = 1/6; image 2: one object, 0 -> target first
    # set 1, round 1 ("a blue shape"): only image 1 (2/3) -> first; round 2: still only image 1 -> first
    # set 2, round 1 ("a red shape"): image 0 2/2, image 2 1/1 tie, image 1 1/3 -> R@1 1/2, R@2 1, rank 1.5
    #        round 2 (held, the set is complete: exactly one object): only image 2 -> first
    got = multi_round_ceiling(QUERIES, OBJECTS, VALID, rounds=2, ks=(1, 2), short="hold")
    expected = {"round1/R@1": 100 * 1.5 / 3, "round1/R@2": 100 * 2 / 3, "round1/meanR": 5.5 / 3,
                "round2/R@1": 100.0, "round2/R@2": 100.0, "round2/meanR": 1.0,
                "mean/R@1": 75.0, "mean/R@2": (200 / 3 + 100) / 2, "mean/meanR": (5.5 / 3 + 1) / 2}
    assert got.keys() == expected.keys()  # no rsum without K = 1, 5, 10
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key


def _brute_force_likelihood(x: np.ndarray, objects: list[tuple[int, ...]], m: int, complete: bool) -> Fraction:
    """P(the first m queries | image) up to the factor shared by all images, by summing over every order of the
    image's objects; `complete`: the image must have exactly m objects."""
    if len(objects) < m or (complete and len(objects) != m):
        return Fraction(0)
    fit = lambda q, o: all(a == ANY or a == b for a, b in zip(q, o))
    orders = list(itertools.permutations(objects))
    return Fraction(sum(all(fit(x[t], order[t]) for t in range(m)) for order in orders), len(orders))


@pytest.mark.parametrize("seed", range(4))
def test_multi_round_ceiling_against_brute_force(seed: int):
    """Sets drawn as the scenes generator draws them (one query per object, objects in random order, one or two
    attributes named); likelihoods by enumerating object orders (exact fractions), the expected rank over every
    gallery order consistent with them (uniform among ties)."""
    rng = np.random.default_rng(seed)
    n, k_max, rounds = 6, 3, 4
    n_obj = rng.integers(1, k_max + 1, size=n)
    objects = rng.integers(0, 2, size=(n, k_max, 2))
    valid = np.arange(k_max)[None, :] < n_obj[:, None]
    queries = []
    for g in range(n):
        x = objects[g, rng.permutation(int(n_obj[g]))].copy()
        for q in x:
            if rng.random() < 0.5:
                q[rng.integers(2)] = ANY
        queries.append(x)
    ks = (1, 2, 5)
    got = multi_round_ceiling(queries, objects, valid, rounds, ks=ks, short="hold")
    for r in range(1, rounds + 1):
        hits, ranks = {k: [] for k in ks}, []
        for q, x in enumerate(queries):
            m = min(r, len(x))
            lik = [_brute_force_likelihood(x, [tuple(o) for o in objects[g, :n_obj[g]]], m, r > len(x))
                   for g in range(n)]
            orders = [o for o in itertools.permutations(range(n))
                      if all(lik[a] >= lik[b] for a, b in itertools.pairwise(o))]  # the Bayes scorer's equally likely orders
            rank = [o.index(q) + 1 for o in orders]
            ranks.append(np.mean(rank))
            for k in ks:
                hits[k].append(np.mean([x <= k for x in rank]))
        for k in ks:
            assert got[f"round{r}/R@{k}"] == pytest.approx(100 * np.mean(hits[k]), abs=1e-9), (r, k)
        assert got[f"round{r}/meanR"] == pytest.approx(np.mean(ranks), abs=1e-9), r


def test_multi_round_ceiling_errors_name_the_set():
    with pytest.raises(ValueError, match="query set 2 has 1 queries, fewer than 2 rounds"):
        multi_round_ceiling(QUERIES, OBJECTS, VALID, rounds=2)
    bad = [QUERIES[0], np.array([[SQUARE, RED], [ANY, BLUE]]), QUERIES[2]]  # image 1 has no red square
    with pytest.raises(ValueError, match="query set 1: its queries do not describe distinct objects of its own image"):
        multi_round_ceiling(bad, OBJECTS, VALID, rounds=1)
    twice = [QUERIES[0], QUERIES[1], np.array([[ANY, RED], [CIRCLE, ANY]])]  # image 2 has one object, two queries
    with pytest.raises(ValueError, match="query set 2: its queries do not describe distinct objects"):
        multi_round_ceiling(twice, OBJECTS, VALID, rounds=2)
    with pytest.raises(ValueError, match=r"query set 0: queries must be \(T_q >= 1, 2\)"):
        multi_round_ceiling([np.ones((2, 3), int)] + QUERIES[1:], OBJECTS, VALID, rounds=1)
    with pytest.raises(ValueError, match=r"objects must be \(3, K, A\)"):
        multi_round_ceiling(QUERIES, OBJECTS[:2], VALID[:2], rounds=1)
