"""The two-tower base every embedding method of the book builds on: an image encoder g_V and a text encoder
g_T over the shared encoder configs, each method adding its own heads, loss and score.

`config` needs `image` (`ImageEncoderConfig`), `text` (`TextEncoderConfig` for the BiGRU over word vectors, or
`BertEncoderConfig` for a BERT-style encoder, which then takes the vocabulary's words, `np.array(vocab.words)`,
in place of the word vectors) and `embed_dim`. The encoders' attribute names (`image_encoder`, `text_encoder`)
are part of every checkpoint's keys.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor, nn

from xmr_core.encoders.heads import HeadOutput
from xmr_core.encoders.image import ImageEncoder
from xmr_core.encoders.text import build_text_encoder
from xmr_core.methods.base import RetrievalModel


class TwoTower(RetrievalModel):
    """`image_encoder(batch) -> Features` and `text_encoder(batch) -> Features`; the pretrained parts of
    both are the backbone that PCME's warm-up phase freezes."""

    def __init__(self, config: Any, word_vectors: np.ndarray) -> None:
        super().__init__()
        self.config = config
        self.image_encoder = ImageEncoder(config.image, config.embed_dim)
        self.text_encoder = build_text_encoder(word_vectors, config.embed_dim, config.text)

    def encode_images(self, batch: dict[str, Tensor]) -> Any:
        """`image_head(image_encoder(batch))`: a head's embedding (a tensor or a tuple such as a Gaussian);
        methods whose heads return more (PVSE, DVSE) or that have none (VSE) override this."""
        return self._head_embedding(self.image_head(self.image_encoder(batch)))

    def encode_captions(self, batch: dict[str, Tensor]) -> Any:
        """`text_head(text_encoder(batch))`, as `encode_images`."""
        return self._head_embedding(self.text_head(self.text_encoder(batch)))

    @staticmethod
    def _head_embedding(out: Any) -> Any:
        return out.emb if isinstance(out, HeadOutput) else out

    def backbone_parameters(self) -> list[nn.Parameter]:
        return self.image_encoder.backbone_parameters() + self.text_encoder.backbone_parameters()
