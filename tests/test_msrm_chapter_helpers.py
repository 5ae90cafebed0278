"""The MSRM chapter's helpers that need no training (xmr_core.chapters.msrm)."""

import numpy as np
import pandas as pd
import torch
from fixtures.msrm import tiny_config

from xmr_core.chapters.msrm import (
    ABLATION_GRIDS,
    COMPARED,
    ORDER,
    TABLE1_COLUMNS,
    batch_incidence,
    label_distance,
    top_k_lists,
    training_runs,
)
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.msrm import MSRM
from xmr_core.results import paper_values


def test_compared_reuses_the_pcme_chapter_and_adds_msrm():
    for name, spec in PCME_COMPARED.items():
        assert COMPARED[name] is spec  # the same builders: the same run keys, so cached runs are loaded
    msrm = COMPARED["MSRM"]
    assert msrm.weight_name == "gamma" and msrm.default == 0.8 and msrm.weights == (0.5, 0.8, 2.0)
    assert list(TABLE1_COLUMNS) == ["T1 i2t R-P", "T1 i2t R@1", "T1 t2i R-P", "T1 t2i R@1"]


def test_paper_values_cover_every_row_we_report():
    paper = paper_values("msrm")
    assert set(paper["table"]) == {"table1", "table2", "table3", "table4"}
    for table in ("table1", "table2"):
        methods = set(paper[paper["table"] == table]["method"])
        assert set(ORDER) <= methods
    msrm = paper[(paper["table"] == "table3") & (paper["method"] == "MSRM") & (paper["protocol"] == "5K")]
    assert float(msrm[msrm["key"] == "plausible/t2i/PMRP"]["value"].iloc[0]) == 35.81  # Table 3, typed by hand
    assert len(paper[(paper["table"] == "table4")]) == 16


def test_label_distance_is_l1_of_concept_labels():
    labels = np.array([[1, 0, 1], [1, 0, 1], [0, 1, 1], [0, 1, 0]], np.uint8)
    # image 0 against 0, 1, 2, 3: 0, 0, |1|+|1| = 2, 1+1+1 = 3 (unsigned labels must not wrap around)
    assert label_distance(labels, 0, np.array([0, 1, 2, 3])).tolist() == [0, 0, 2, 3]


def test_top_k_lists_by_hand():
    split = Split("t", "mem", ["a", "b", "c"], ["c0", "c1", "c2"], ["x", "y", "z"], np.array([0, 1, 2]),
                  image_labels=np.array([[1, 0], [1, 1], [0, 1]], np.uint8))
    i2t = torch.tensor([[0.1, 0.9, 0.5], [0.0, 0.0, 1.0], [0.3, 0.2, 0.1]])  # image 0: captions 1, 2
    t2i = torch.tensor([[0.2, 0.0, 0.0], [0.1, 0.0, 0.0], [0.7, 0.0, 0.0]])  # caption 0 (of image 0): images 2, 0
    out = top_k_lists(i2t, t2i, split, [0], [0], k=2)
    assert out["direction"].tolist() == ["i2t", "i2t", "t2i", "t2i"]
    assert out["result"].tolist() == [1, 2, 2, 0]
    # zeta to image 0's labels (1, 0): caption 1 -> image 1 (1, 1): 1; caption 2 -> image 2 (0, 1): 2; image 0: 0
    assert out["zeta"].tolist() == [1, 2, 2, 0]
    assert out["instance"].tolist() == [False, False, False, True]


def test_batch_incidence_is_eq8_with_ones_on_matches():
    rng = np.random.default_rng(0)
    split = Split("t", "mem", [f"i{k}" for k in range(3)], [f"c{k}" for k in range(4)],
                  ["red circle", "blue square", "red circle", "green star"], np.array([0, 1, 1, 2]),
                  images=rng.integers(0, 255, (3, 16, 16, 3), dtype=np.uint8))
    vocab = Vocabulary.build(split.captions)
    model = MSRM(tiny_config(), rng.standard_normal((len(vocab), 8)).astype(np.float32))
    s, matched = batch_incidence(model, split, vocab, [0, 1, 3], "cpu")
    assert s.shape == (3, 3) and matched.dtype == bool
    assert np.allclose(s[matched], 1.0) and np.diag(matched).all()
    off = s[~matched]
    assert ((off > 0) & (off < 1)).all()  # exp(-d^2 / alpha) with alpha = 2 and d^2 > 0


def test_training_runs_counts_the_grids():
    runs = training_runs("cpu", 3)
    assert runs["runs"].iloc[0] == 4 * 5 and runs["runs"].iloc[1] == 5  # 3 lrs + 2 other weights
    fig6 = runs[runs["part"] == "Figure 6: batch grid"]["runs"].iloc[0]
    assert fig6 == 2  # 32 and 64; 128 is the default recipe's batch (the MSRM run itself)
    assert set(ABLATION_GRIDS) == {"smoke", "cpu", "paper"}
    assert isinstance(runs, pd.DataFrame)


def test_chapter_runs_seed_every_model_zero_shot_and_the_compared_two_on_all_classes():
    from xmr_core.chapters.msrm import SPECS, chapter_runs

    runs = chapter_runs("cpu", [5, 6, 7])
    zero_shot = [r for r in runs if r[0] == "zero-shot"]
    assert sorted(zero_shot) == sorted(("zero-shot", n, k, s) for s in (5, 6, 7) for n, k in SPECS)
    all_classes = [r for r in runs if r[0] == "all classes"]
    seeded = {(n, k) for _, n, k, s in all_classes if s == 7}
    assert seeded == {("PCME", 1), ("MSRM", 1)}
    assert {(n, k) for _, n, k, s in all_classes if s == 5} == set(SPECS)  # every model has its first seed
    assert len(all_classes) == len(SPECS) + 2 * 2
    assert len(set(runs)) == len(runs)
    smoke = chapter_runs("smoke", [0])
    assert [r for r in smoke if r[0] == "all classes"] == [("all classes", "PCME", 1, 0), ("all classes", "MSRM", 1, 0)]
