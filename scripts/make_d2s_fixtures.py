#!/usr/bin/env python3
"""Golden outputs of D2S's own reference code (Nguyen et al., ECIR 2024;
github.com/thongnt99/lsr-multimodal, Apache-2.0) over BLIP, for lexlip-model's D2S parity tests.

A tiny random D2S head is built with the published `model.py` (`D2SModel`, over a tiny random
DistilBERT masked LM as its `mlm_head`), saved with `save_pretrained` as the published
`lsr42/d2s_*` checkpoints are, and run over the embeddings of the tiny BLIP of
`scripts/make_blip_fixtures.py` (model/tests/fixtures/blip-tiny, run by transformers'
BlipForImageTextRetrieval). Run once, after make_blip_fixtures.py, in a virtualenv outside the
repository (CI never runs it):

    git clone https://github.com/thongnt99/lsr-multimodal /tmp/lsr-multimodal   # ae7ac1e used
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch "transformers<5" safetensors pillow
    LSR=/tmp/lsr-multimodal /tmp/venv-ref/bin/python scripts/make_d2s_fixtures.py

It writes under model/tests/fixtures/:
  d2s-tiny/config.json, model.safetensors   the head (weights rounded to f16, stored as f16);
                          no tokenizer: the published repositories leave it to
                          distilbert-base-uncased, whose 30,522 word pieces the tests take from
                          the tiny SPLADE model (the same vocabulary)
  d2s.json                unit vectors and the head's lexicons of them; texts: BLIP's embedding,
                          the lexicon restricted to the text's own word pieces (the reference's
                          retrieval without expansion) and the full one; images: BLIP's pixels'
                          sum and the lexicon. A lexicon of thousands of terms is kept as its
                          size, its sum and its 64 strongest terms
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "model" / "tests" / "fixtures"
LSR = Path(os.environ.get("LSR", "/tmp/lsr-multimodal"))
sys.path.insert(0, str(LSR))

from model import D2SConfig, D2SModel  # noqa: E402
from published_fixtures import IMAGES, image_entry, sparse, splade_dir, write_doc  # noqa: E402
from transformers import (  # noqa: E402
    BlipForImageTextRetrieval,
    BlipImageProcessor,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertForMaskedLM,
)

torch.manual_seed(0)
torch.set_grad_enabled(False)

TEXTS = [
    "a dog runs on the grass",
    "two people ride bicycles down a busy city street at night",
    "a small boat near the water under a blue sky with white clouds and birds",
    "qwzx",
]


def summary(row: torch.Tensor, k: int = 64) -> dict:
    """A lexicon of thousands of terms, kept small: how many, their sum, the `k` strongest."""
    values, idx = row.topk(k)
    return {
        "terms": int((row > 0).sum()),
        "sum": float(row.double().sum()),
        "top": {"ids": idx.tolist(), "weights": [float(v) for v in values]},
    }


def main() -> None:
    blip_dir = OUT / "blip-tiny"
    blip = BlipForImageTextRetrieval.from_pretrained(blip_dir).eval()
    dense_size = blip.config.image_text_hidden_size
    work = Path(tempfile.mkdtemp())
    DistilBertForMaskedLM(DistilBertConfig(
        vocab_size=30522, dim=32, n_layers=1, n_heads=1, hidden_dim=64,
        max_position_embeddings=64,
    )).save_pretrained(work / "distilbert")
    d2s = D2SModel(D2SConfig(mlm_head=str(work / "distilbert"), dense_size=dense_size)).eval()
    gen = torch.Generator().manual_seed(1)
    for name, p in d2s.named_parameters():
        if name == "vocab_layer_norm.weight":
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        elif name == "vocab_projector.bias":
            # Somewhat below zero: about two in five terms weigh anything.
            p.copy_(-0.1 + 0.3 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        p.copy_(p.half().float())

    words = BertTokenizerFast(tokenizer_file=str(splade_dir() / "tokenizer.json"))
    blip_tok = BertTokenizerFast(tokenizer_file=str(blip_dir / "tokenizer.json"))

    # Unit vectors straight into the head.
    dense = torch.nn.functional.normalize(torch.randn(3, dense_size, generator=gen), dim=-1)
    heads = d2s(dense)

    # Texts: BLIP's contrastive embedding, then the head, restricted to the text's own words
    # (the reference's retrieval without expansion: its word pieces, no special tokens).
    enc = blip_tok(TEXTS, padding=True, truncation=True, max_length=35, return_tensors="pt")
    states = blip.text_encoder(input_ids=enc.input_ids,
                               attention_mask=enc.attention_mask).last_hidden_state
    text_dense = torch.nn.functional.normalize(blip.text_proj(states[:, 0, :]), dim=-1)
    own = words(TEXTS, add_special_tokens=False, padding=True, return_tensors="pt")
    masked = d2s(text_dense, own.input_ids, own.attention_mask)
    expanded = d2s(text_dense)

    # Images: BLIP's processor (Pillow, bicubic, squashed), its contrastive embedding, the head.
    processor = BlipImageProcessor.from_pretrained(blip_dir)
    pil = [Image.open(OUT / "images" / n).convert("RGB") for n in IMAGES]
    pixels = processor(pil, return_tensors="pt").pixel_values
    states = blip.vision_model(pixel_values=pixels).last_hidden_state
    image_dense = torch.nn.functional.normalize(blip.vision_proj(states[:, 0, :]), dim=-1)
    images = d2s(image_dense)

    out = OUT / "d2s-tiny"
    shutil.rmtree(out, ignore_errors=True)
    d2s.config.mlm_head = "distilbert-base-uncased"
    d2s.half().save_pretrained(out, safe_serialization=True)

    doc = {
        "reference": "github.com/thongnt99/lsr-multimodal ae7ac1e (D2SModel) over "
                     "transformers' BlipForImageTextRetrieval (blip-tiny)",
        "dense": [
            {"embedding": dense[i].tolist(), "lexicon": summary(heads[i])}
            for i in range(dense.shape[0])
        ],
        "texts": [
            {
                "text": t,
                "own_ids": [i for i in own.input_ids[k].tolist() if i != 0],
                "embedding": text_dense[k].tolist(),
                "lexicon": sparse(masked[k]),
                "expanded": summary(expanded[k]),
            }
            for k, t in enumerate(TEXTS)
        ],
        "images": [
            image_entry(n, pixels[k], embedding=image_dense[k].tolist(), lexicon=summary(images[k]))
            for k, n in enumerate(IMAGES)
        ],
    }
    write_doc(OUT, "d2s.json", out, doc)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
