"""Scenes benchmark: determinism, caching, and every relevance view against an independent evaluator.

The evaluator here parses caption text back with its own regular expressions and checks it against the
objects by brute force (permutations), sharing no code with `scene_grammar.holds`.
"""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import numpy as np
import pytest

from xmr_core.ceiling import multi_round_ceiling
from xmr_core.data import scene_grammar as g
from xmr_core.data.scenes import (
    ScenesConfig,
    exact_block,
    generate_split,
    load_scenes,
    main_object,
    query_attributes,
    query_round_statistics,
    scenes_config,
)

NUM = {
    w: i
    for i, w in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    )
}
SHAPE = {"circle", "square", "triangle", "diamond", "star", "cross"}
PLURAL = {s + ("es" if s.endswith("s") else "s"): s for s in SHAPE}
COLOUR = {"red", "green", "blue", "yellow", "orange", "purple", "cyan", "pink"}
SIZE = {"small", "large"}
VPOS = {"top": 0, "bottom": 2}
HPOS = {"left": 0, "right": 2}
REL = {"to the left of": "L", "to the right of": "R", "above": "A", "below": "B"}

TINY = ScenesConfig(seed=3, n_train=40, n_val=30, n_test=60)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("XMR_CACHE", str(tmp_path_factory.mktemp("scenes")))
    yield load_scenes(TINY, progress=False, regions=False)
    mp.undo()


# ------------------------------------------------------------------ independent parser and evaluator


def scene_objects(split, i: int) -> list[dict]:
    """Objects of image i as plain dicts; the coarse position comes from the pixel centre (thirds of the
    canvas), not from the generator's cell arithmetic."""
    lay, size = split.meta["layout"], split.images.shape[1]
    out = []
    for j in range(int(lay.n_objects[i])):
        out.append({
            "shape": g.SHAPES[lay.shape[i, j]], "colour": g.COLOURS[lay.colour[i, j]],
            "size": g.SIZES[lay.size[i, j]], "row": int(lay.row[i, j]), "col": int(lay.col[i, j]),
            "v": int(3 * lay.cy[i, j] // size), "h": int(3 * lay.cx[i, j] // size),
        })  # fmt: skip
    return out


def parse_np(text: str) -> dict:
    """'a large red circle at the top left' -> {'size': 'large', 'colour': 'red', 'shape': 'circle', ...}."""
    words = text.split()
    assert words[0] in ("a", "an"), text
    words = words[1:]
    d: dict = {}
    while words and words[0] in SIZE | COLOUR:
        w = words.pop(0)
        d["size" if w in SIZE else "colour"] = w
    noun = words.pop(0)
    if noun != "shape":
        assert noun in SHAPE, text
        d["shape"] = noun
    if words:
        place = " ".join(words)
        if place == "in the center":
            d["v"], d["h"] = 1, 1
        else:
            m = re.fullmatch(r"(at|on) the (top|bottom|left|right)(?: (left|right))?", place)
            assert m, text
            first, second = m.group(2), m.group(3)
            d["v"] = VPOS.get(first, 1)
            d["h"] = HPOS[second] if second else HPOS.get(first, 1)
    return d


def fits(obj: dict, d: dict) -> bool:
    return all(obj[k] == v for k, v in d.items())


def parse_count(text: str) -> tuple[dict, int] | None:
    m = re.fullmatch(r"(\w+)((?: (?:small|large|" + "|".join(COLOUR) + r"))*) (\w+)", text)
    if not m or m.group(1) not in NUM:
        return None
    d: dict = {}
    for w in m.group(2).split():
        d["size" if w in SIZE else "colour"] = w
    noun = m.group(3)
    if noun in PLURAL:
        d["shape"] = PLURAL[noun]
    elif noun in SHAPE:
        d["shape"] = noun
    else:
        assert noun in ("shape", "shapes"), text
    return d, NUM[m.group(1)]


def caption_holds(text: str, objs: list[dict]) -> bool:
    """Brute-force truth of a caption in a scene, from the caption text alone."""
    if m := re.fullmatch(r"something (\w+)", text):
        return any(o["colour"] == m.group(1) for o in objs)
    if (cnt := parse_count(text)) is not None:
        d, n = cnt
        return sum(fits(o, d) for o in objs) == n
    for phrase, rel in REL.items():
        if f" {phrase} " in text:
            a, b = (parse_np(t) for t in text.split(f" {phrase} "))
            key = "col" if rel in "LR" else "row"
            less = rel in "LA"
            return any(
                fits(x, a) and fits(y, b) and (x[key] < y[key] if less else x[key] > y[key])
                for x, y in itertools.permutations(objs, 2)
            )
    total = None
    if text.startswith("only "):
        text, total = text[5:], "all"
    elif text.endswith(" and nothing else"):
        text, total = text[: -len(" and nothing else")], "all"
    elif m := re.fullmatch(r"exactly (\w+) shapes?: (.*)", text):
        text, total = m.group(2), NUM[m.group(1)]
    text = text.removeprefix("there is ")
    descs = [parse_np(t) for t in re.split(r", | and ", text)]
    if total == "all" and len(objs) != len(descs) or isinstance(total, int) and len(objs) != total:
        return False
    return any(
        all(fits(objs[j], d) for j, d in zip(p, descs))
        for p in itertools.permutations(range(len(objs)), len(descs))
    )


# ------------------------------------------------------------------------------------------- tests


def test_config_presets_and_validation():
    smoke, cpu = scenes_config("smoke"), scenes_config("cpu")
    assert smoke.n_train < cpu.n_train and smoke.key() != cpu.key()
    multi = scenes_config("cpu", variant="multi")
    assert multi.max_objects == 10 and multi.grid**2 >= multi.max_objects
    with pytest.raises(ValueError, match="max_objects"):
        ScenesConfig(grid=2, max_objects=5)
    with pytest.raises(ValueError, match="paper"):
        scenes_config("paper")


def test_cpu_test_splits_are_sized_for_query_noise_and_leave_train_and_val_alone():
    single, multi = scenes_config("cpu"), scenes_config("cpu", variant="multi")
    # COCO 5K's size: 5,000 images, 25,000 captions, whose 1K protocol is five real folds of 1,000 images
    assert single.split_sizes() == {"train": 8000, "val": 1000, "test": 5000} and single.captions_per_image == 5
    assert multi.split_sizes() == {"train": 5000, "val": 1000, "test": 2000}  # HMRN's 2,000 query sets
    # each split has its own seed stream: a larger test split changes neither train nor val
    small, large = ScenesConfig(seed=1, n_train=6, n_val=5, n_test=4), ScenesConfig(seed=1, n_train=6, n_val=5, n_test=9)
    for name in ("train", "val"):
        a, b = generate_split(small, name), generate_split(large, name)
        assert a["images"].tobytes() == b["images"].tobytes() and a["captions"] == b["captions"]
    assert len(generate_split(large, "test")["images"]) == 9


def test_deterministic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "a"))
    a = load_scenes(TINY, progress=False, regions=False)
    stamp = (tmp_path / "a" / "scenes" / TINY.key() / "test_images.npy").stat().st_mtime_ns
    hit = load_scenes(TINY, progress=False, regions=False)  # from the cache: files untouched, same content
    assert (tmp_path / "a" / "scenes" / TINY.key() / "test_images.npy").stat().st_mtime_ns == stamp
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "b"))
    b = load_scenes(TINY, progress=False, regions=False)  # regenerated from scratch in another cache
    for other in (hit, b):
        for name in ("train", "val", "test"):
            x, y = a[name], other[name]
            assert x.images.tobytes() == y.images.tobytes()
            assert x.captions == y.captions and x.caption_level == y.caption_level
            assert x.meta["logical_forms"] == y.meta["logical_forms"]
            assert x.queries == y.queries
            assert np.array_equal(x.meta["object_boxes"], y.meta["object_boxes"])
            assert (x.exact is None) == (name == "train") or np.array_equal(x.exact, y.exact)
    c = load_scenes(ScenesConfig(seed=4, n_train=40, n_val=30, n_test=60), progress=False, regions=False)
    assert c["test"].images.tobytes() != a["test"].images.tobytes()


def test_shapes_and_levels(tiny):
    for name, n in TINY.split_sizes().items():
        s = tiny[name]
        assert s.images.shape == (n, 64, 64, 3) and s.images.dtype == np.uint8
        assert s.n_captions == 5 * n
        assert np.array_equal(s.caption_image, np.repeat(np.arange(n), 5))
        assert set(s.caption_level) <= set(g.LEVELS)
        assert s.caption_level[0::5] == ["full"] * n
        assert all(lv in ("relational", "partial") for lv in s.caption_level[2::5])
        assert s.image_labels.shape == (n, 14)
    assert tiny["test"].exact.shape == (300, 60) and tiny["test"].exact.dtype == bool


def test_every_caption_holds_in_its_own_image(tiny):
    for name in ("train", "test"):
        s = tiny[name]
        for c, (text, i) in enumerate(zip(s.captions, s.caption_image)):
            assert caption_holds(text, scene_objects(s, int(i))), (name, c, text)


def test_exact_relevance_matches_brute_force(tiny):
    s = tiny["test"]
    objs = [scene_objects(s, i) for i in range(s.n_images)]
    rng = np.random.default_rng(0)
    sample = rng.choice(s.n_captions, size=120, replace=False)
    for c in sample:
        expect = np.array([caption_holds(s.captions[c], o) for o in objs])
        assert np.array_equal(s.exact[c], expect), s.captions[c]
    assert np.array_equal(s.relevance("exact", "i2t"), s.exact.T)


def test_exact_block_on_train_matches_brute_force(tiny):
    s = tiny["train"]
    caps, imgs = np.arange(0, s.n_captions, 7), np.arange(s.n_images)
    block = exact_block(s, caps, imgs)
    objs = [scene_objects(s, i) for i in imgs]
    expect = np.array([[caption_holds(s.captions[c], o) for o in objs] for c in caps])
    assert np.array_equal(block, expect)
    v = tiny["val"]
    assert np.array_equal(exact_block(v, np.arange(v.n_captions), np.arange(v.n_images)), v.exact)


def test_full_captions_are_exhaustive(tiny):
    # a full caption can only match images with the same objects: same multiset of (shape, colour, size, v, h)
    s = tiny["test"]
    key = [sorted(tuple(sorted(o.items())) for o in scene_objects(s, i)) for i in range(s.n_images)]
    for c in np.flatnonzero(np.array(s.caption_level) == "full"):
        for i in np.flatnonzero(s.exact[c]):
            assert key[i] == key[s.caption_image[c]]


def test_vague_captions_are_not_size_or_position_only(tiny):
    s = tiny["train"]
    for text, lv in zip(s.captions, s.caption_level):
        if lv == "vague":
            assert text.startswith(("something ", "a")) or parse_count(text), text
            assert not any(p in text for p in ("top", "bottom", "left", "right", "center", "small", "large"))


def test_class_view_and_split(tiny):
    s = tiny["test"]
    for i in range(s.n_images):
        objs = scene_objects(s, i)
        # main object: the largest, ties to the first in reading order
        main = min(objs, key=lambda o: (o["size"] != "large", o["row"], o["col"]))
        assert s.class_names[s.image_class[i]] == f"{main['colour']} {main['shape']}"
    split = tiny.meta["class_split"]
    seen, unseen = set(split["seen"]), set(split["unseen"])
    assert not seen & unseen and len(seen | unseen) == 48 and len(unseen) == 12
    names = [s.class_names[c].split() for c in seen]
    assert {c for c, _ in names} == COLOUR and {sh for _, sh in names} == SHAPE  # every attribute seen
    rel = s.relevance("class", "t2i")
    assert np.array_equal(rel[7], s.image_class == s.image_class[s.caption_image[7]])


def test_plausible_labels(tiny):
    s = tiny["val"]
    concepts = s.meta["concepts"]
    for i in range(s.n_images):
        present = {o["shape"] for o in scene_objects(s, i)} | {o["colour"] for o in scene_objects(s, i)}
        assert {concepts[k] for k in np.flatnonzero(s.image_labels[i])} == present
    rel0 = s.relevance("plausible", "t2i", zeta=0)
    assert rel0[np.arange(s.n_captions), s.caption_image].all()


def test_region_queries_one_per_object_and_hold(tiny):
    s = tiny["test"]
    for i, qs in enumerate(s.queries):
        objs = scene_objects(s, i)
        assert len(qs) == len(objs)
        for q, o in zip(qs, objs):  # query j describes object j by its shape or colour (+ at most one more)
            d = parse_np(q)
            assert fits(o, d) and ("shape" in d or "colour" in d) and len(d) <= 3, (i, q)  # position = 2 keys


def test_object_boxes_cover_objects(tiny):
    s = tiny["test"]
    lay, boxes = s.meta["layout"], s.meta["object_boxes"]
    valid = lay.valid
    x0, y0, x1, y1 = (boxes[..., k][valid] for k in range(4))
    cx, cy = lay.cx[valid], lay.cy[valid]
    assert ((x0 <= cx) & (cx <= x1) & (y0 <= cy) & (cy <= y1)).all()
    assert ((x1 - x0 >= 3) & (x1 <= 64) & (y1 <= 64) & (x0 >= 0) & (y0 >= 0)).all()


def test_multi_variant(cache):
    cfg = ScenesConfig(
        seed=1, n_train=10, n_val=10, n_test=30, image_size=96, grid=4, min_objects=3, max_objects=6,
        variant="multi", region_steps=20,
    )  # fmt: skip
    s = load_scenes(cfg, progress=False)["test"]
    assert s.images.shape == (30, 96, 96, 3)
    assert s.regions.shape[:2] == (30, 10)  # R = max_objects + 4 background boxes
    assert all(3 <= len(q) <= 6 for q in s.queries)
    objs = [scene_objects(s, i) for i in range(s.n_images)]
    for c in range(0, s.n_captions, 3):
        expect = np.array([caption_holds(s.captions[c], o) for o in objs])
        assert np.array_equal(s.exact[c], expect), s.captions[c]
    # multi-query rounds: positives of the first r queries, by brute force over the parsed query texts
    rounds = query_round_statistics(s, max_rounds=6).set_index("round")
    for r in (1, 3, 6):
        imgs = [i for i in range(s.n_images) if len(s.queries[i]) >= r]
        pos = [
            sum(
                all(any(fits(o, parse_np(q)) for o in objs[j]) for q in s.queries[i][:r])
                for j in range(s.n_images)
            )
            for i in imgs
        ]
        assert rounds.loc[r, "images"] == len(imgs)
        assert rounds.loc[r, "positives mean"] == pytest.approx(np.mean(pos))
        assert rounds.loc[r, "R@1 ceiling"] == pytest.approx(100 * np.mean(1 / np.array(pos)))
    # the ceiling's input: every query's attribute values fit exactly the objects its text fits
    queries, objects, valid = query_attributes(s)
    assert [len(x) for x in queries] == [len(q) for q in s.queries] and valid.sum(1).tolist() == \
        [len(o) for o in objs]
    for i in range(0, s.n_images, 4):
        for t, text in enumerate(s.queries[i]):
            for j in range(s.n_images):
                by_text = [fits(o, parse_np(text)) for o in objs[j]]
                by_values = [all(a == g.ANY or a == b for a, b in zip(queries[i][t], objects[j, o]))
                             for o in range(valid[j].sum())]
                assert by_text == by_values, (i, t, j)
    # round 1 of the Bayes ceiling from the texts: likelihood = objects the first query fits / objects
    ceiling = multi_round_ceiling(queries, objects, valid, rounds=3)
    r1 = []
    for i in range(s.n_images):
        lik = [Fraction(sum(fits(o, parse_np(s.queries[i][0])) for o in objs[j]), len(objs[j]))
               for j in range(s.n_images)]
        above, tied = sum(v > lik[i] for v in lik), sum(v == lik[i] for v in lik)
        r1.append(min(1, max(0, (1 - above) / tied)))
    assert ceiling["round1/R@1"] == pytest.approx(100 * np.mean(r1))


def test_statistics_hand_worked():
    from xmr_core.data.corpus import Corpus, Split
    from xmr_core.data.scenes import scenes_statistics

    exact = np.array([[1, 0, 0], [1, 1, 1], [0, 1, 1]], bool)  # caption c is written for image c
    s = Split("test", "hand", ["a", "b", "c"], ["0", "1", "2"], ["x", "y", "z"], np.arange(3),
              exact=exact, caption_level=["full", "vague", "vague"])  # fmt: skip
    df = scenes_statistics(Corpus("hand", {"test": s})).set_index(["view", "direction", "level"]).sort_index()
    t2i = df.loc[("exact", "t2i")]
    # positives per caption 1, 3, 2 -> ceilings 1, 1/3, 1/2
    assert t2i.loc["full", "instance R@1 ceiling"] == pytest.approx(100)
    assert t2i.loc["vague", "instance R@1 ceiling"] == pytest.approx(100 * (1 / 3 + 1 / 2) / 2)
    assert t2i.loc["all", "only own %"] == pytest.approx(100 / 3)
    assert t2i.loc["all", "random R-P"] == pytest.approx(100 * (1 / 3 + 1 + 2 / 3) / 3)
    # image popularity 2, 2, 2 -> order 0, 1, 2; R-P: caption 0: 1/1, caption 1: 3/3, caption 2: 1/2
    assert t2i.loc["all", "popularity R-P"] == pytest.approx(100 * 2.5 / 3)
    i2t = df.loc[("exact", "i2t", "all")]
    # each image holds 2 captions, one its own; caption popularity 1, 3, 2 -> order 1, 2, 0
    assert i2t["instance R@1 ceiling"] == pytest.approx(50)
    assert i2t["popularity R-P"] == pytest.approx(100 * (0.5 + 1 + 1) / 3)
    assert df.loc[("instance", "t2i", "all"), "positives mean"] == 1


def test_captions_use_only_grammar_words(tiny):
    from xmr_core.data.text import tokenize

    allowed = set(g.vocabulary()) | {",", ":"}
    for name in ("train", "test"):
        words = {w for c in tiny[name].captions for w in tokenize(c)}
        words |= {w for qs in tiny[name].queries for q in qs for w in tokenize(q)}
        assert words <= allowed, words - allowed


@pytest.mark.slow
def test_grammar_vocabulary_is_all_glove():
    from xmr_core.data.text import glove_6b_50d

    kv = glove_6b_50d()
    missing = [w for w in [*g.vocabulary(), ",", ":"] if w not in kv.key_to_index]
    assert not missing


def test_main_object_is_the_largest_then_first_in_reading_order(tiny):
    """Brute force over each image's objects (plain Python ints): the largest, ties to the smallest (row, col). The
    layout's fields are int16, so the padding slots' sentinel must not be computed in int16 (numpy 2.5 refuses the
    overflow that numpy 2.4 wrapped)."""
    for name in ("train", "test"):
        lay = tiny[name].meta["layout"]
        assert lay.row.dtype == np.int16
        expected = [min(range(int(lay.n_objects[i])), key=lambda j: (-int(lay.size[i, j]), int(lay.row[i, j]),
                                                                        int(lay.col[i, j])))
                    for i in range(len(lay.n_objects))]
        assert main_object(lay).tolist() == expected
        assert (lay.n_objects < lay.row.shape[1]).any()  # padding slots exist, so the sentinel is exercised
