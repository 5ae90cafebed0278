"""The PCME chapter's notebook helpers that need no training (xmr_core.chapters.pcme, last section)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from xmr_core.chapters.pcme import (
    TABLE2_COLUMNS,
    TABLE3_COLUMNS,
    model_label,
    own_caption_score,
    table1_frame,
    table1_rows,
    table3_ceiling_row,
)
from xmr_core.methods.pcme import TEST_TIME_SIMILARITIES


def test_columns_and_labels():
    assert list(TABLE2_COLUMNS) == ["T2 i2t R-P", "T2 i2t R@1", "T2 t2i R-P", "T2 t2i R@1"]
    assert TABLE2_COLUMNS["T2 t2i R@1"] == "class/t2i/R@1"
    assert list(TABLE3_COLUMNS)[:2] == ["T3 1K i2t PMRP", "T3 1K i2t R@1"] and len(TABLE3_COLUMNS) == 8
    assert TABLE3_COLUMNS["T3 5K t2i PMRP"] == "5K|plausible/t2i/PMRP"
    assert model_label("PVSE", 4) == "PVSE K=4" and model_label("PCME", 1) == "PCME"


def test_own_caption_score():
    # images 0, 1, 2; captions 0, 1 -> image 0, caption 2 -> image 1, caption 3 -> image 2
    caption_image = np.array([0, 0, 1, 2])
    scores = torch.tensor([[1.0, 3.0, 9.0, 9.0],   # row 0 queries image 0: mean(1, 3) = 2
                           [9.0, 9.0, 9.0, 5.0]])  # row 1 queries image 2: 5
    assert own_caption_score(scores, np.array([0, 2]), caption_image) == pytest.approx((2.0 + 5.0) / 2)


def test_table3_ceiling_row():
    ceiling = {"1K": {"i2t/R@1": 90.0, "t2i/R@1": 80.0}, "5K": {"i2t/R@1": 70.0, "t2i/R@1": 60.0}}
    row = table3_ceiling_row(ceiling, "scenes")
    assert row == {"model": "Bayes ceiling", "seeds": 0, "5K rSum % of ceiling": 100.0,
                   "T3 1K i2t R@1 (scenes)": 90.0, "T3 1K t2i R@1 (scenes)": 80.0,
                   "T3 5K i2t R@1 (scenes)": 70.0, "T3 5K t2i R@1 (scenes)": 60.0}


def test_table1_rows_and_frame():
    metrics = {m: {"class/i2t/R-P": float(k), "class/t2i/R-P": float(10 + k)}
               for k, m in enumerate(TEST_TIME_SIMILARITIES)}
    rows = table1_rows("mu only", 0, {"mean_cosine": {"class/i2t/R-P": 1.0, "class/t2i/R-P": 2.0}})
    assert rows == [{"variant": "mu only", "similarity": "Mean only", "seed": 0, "i2t R-P": 1.0, "t2i R-P": 2.0}]
    rows += table1_rows("mu only", 1, {"mean_cosine": {"class/i2t/R-P": 3.0, "class/t2i/R-P": 2.0}})
    rows += table1_rows("PCME", 0, metrics)
    frame = table1_frame(pd.DataFrame(rows), "scenes")
    assert list(frame["similarity"]) == ["Mean only"] + [v[0] for v in TEST_TIME_SIMILARITIES.values()]
    assert list(frame["variant"]) == ["mu only"] + ["PCME"] * len(TEST_TIME_SIMILARITIES)
    assert frame["i2t R-P (scenes)"].iloc[0] == 2.0 and frame["i2t std"].iloc[0] == pytest.approx(math.sqrt(2.0))
    assert frame["t2i R-P (scenes)"].iloc[0] == 2.0 and frame["t2i std"].iloc[0] == 0.0
    assert frame["t2i R-P (scenes)"].tolist()[1:] == [10.0 + k for k in range(len(TEST_TIME_SIMILARITIES))]
    assert frame["space"].iloc[0] == "O(N)" and frame["sampling"].iloc[-1] == TEST_TIME_SIMILARITIES["match_prob"][1]
    assert frame["i2t R-P (paper, CUB)"].notna().all()  # every row of Table 1 is in the paper's values
