#!/usr/bin/env python3
"""Golden outputs of VDR's own reference code (Zhou et al., ICLR 2024; github.com/jzhoubu/vsearch,
MIT) for lexlip-model's VDR parity tests.

A tiny random VDR cross-modal model is built with the published modeling code itself
(`src/ir/encoder/vdr_crossmodal_{text,image}.py`, wrapped in its `Retriever`), saved the way
`save_pretrained` saves the published checkpoint, and run on a few texts and images. Run once, in a
virtualenv outside the repository (CI never runs it; it has no torch):

    git clone https://github.com/jzhoubu/vsearch /tmp/vsearch      # commit 2496bf9 was used
    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch torchvision transformers safetensors pillow wordcloud \
        hydra-core scipy matplotlib jsonlines nvidia-ml-py spacy
    VSEARCH=/tmp/vsearch /tmp/venv-ref/bin/python scripts/make_vdr_fixtures.py

It writes under model/tests/fixtures/:
  vdr-tiny/config.json        the Retriever's config, as the published one: encoder_q
                              (vdr_crossmodal_text over bert-base-uncased) and encoder_p
                              (vdr_crossmodal_image), here with a 2-layer, 32-wide BERT and a
                              2-layer, 32-wide ViT/16 at 64 px
  vdr-tiny/pytorch_model.bin  its weights (rounded to f16 and stored as f16), the PyTorch pickle
                              older `save_pretrained` wrote; the tokenizer is not in the directory
                              (the published model takes bert-base-uncased's), the tests use the
                              tiny SPLADE model's, which has the same 30,522 word pieces
  vdr.json                    token ids, and the reference's lexicons (`embed`) of the texts and
                              images: default top-k, a smaller top-k, bag-of-words; the
                              un-sparsified weights' top terms
The reference runs in float32 on weights already rounded to f16, so the file holds exactly the
weights it used.
"""

import hashlib
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
VSEARCH = Path(os.environ.get("VSEARCH", "/tmp/vsearch"))
sys.path.insert(0, str(VSEARCH))

from src.ir import Retriever, RetrieverConfig  # noqa: E402
from src.ir.encoder import vdr_crossmodal_image as vdr_image  # noqa: E402
from src.ir.encoder.vdr_crossmodal_text import VALID_TOKEN_IDS  # noqa: E402
from transformers import BertConfig, BertModel  # noqa: E402

from published_fixtures import (  # noqa: E402
    IMAGES, image_entry, sparse as sparse_by_id, splade_dir, write_doc,
)

torch.manual_seed(0)
np.random.seed(0)
torch.set_grad_enabled(False)

MAX_LEN = 24  # the tiny model's max_len (the published one: 128)
TEXTS = [
    "a dog runs on the grass",
    "Four thousand Martian days after setting its wheels in Gale Crater, the rover remains busy",
    "red heart",
    "qwzx",
]


def tiny_bert(tokenizer_dir: Path, into: Path) -> None:
    """A random 2-layer, 32-wide BERT over bert-base-uncased's 30,522 word pieces: what
    `AutoModel.from_pretrained(model_id)` loads inside the reference text encoder."""
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=1,
        intermediate_size=64, max_position_embeddings=64,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(into)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, into / name)


def randomize(model: torch.nn.Module) -> None:
    """Every parameter random (the reference initialises the image projection to ones, which
    would make every term equal), then rounded to f16."""
    gen = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        if name.endswith("ln.weight") or "ln_" in name and name.endswith(".weight") \
                or "LayerNorm.weight" in name:
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        elif name.endswith(".bias") or "LayerNorm.bias" in name:
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        else:
            p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        p.copy_(p.half().float())


def sparse(row: torch.Tensor) -> dict:
    """A lexicon over VDR's valid word pieces as (BERT id, weight) pairs of its non-zeros."""
    return sparse_by_id(row, VALID_TOKEN_IDS)


def top_terms(row: torch.Tensor, k: int) -> dict:
    values, idx = row.topk(k)
    return {
        "ids": [VALID_TOKEN_IDS[i] for i in idx.tolist()],
        "weights": [float(v) for v in values],
    }


def main() -> None:
    splade = splade_dir()
    work = Path(tempfile.mkdtemp())
    tiny_bert(splade, work / "bert")
    config = RetrieverConfig(
        encoder_q={
            "type": "vdr_crossmodal_text", "model_id": str(work / "bert"), "max_len": MAX_LEN,
            "shift_vocab_num": 999, "topk": 768, "pooling": "max", "pooling_topk": None,
            # The reference sizes its layer norm by this BertConfig key (bert-base: 768).
            "hidden_size": 32,
        },
        encoder_p={
            "type": "vdr_crossmodal_image", "tokenizer_id": str(work / "bert"), "max_len": 256,
            "topk": 768, "resolution": 64, "patch_size": 16, "width": 32, "layers": 2,
            "heads": 2,
        },
        max_len=512, shared_encoder=False,
    )
    model = Retriever(config).eval()
    randomize(model)
    # The reference's preprocessing at the tiny model's resolution.
    vdr_image.preprocess.transforms[0].size = 64
    vdr_image.preprocess.transforms[1].size = (64, 64)

    q, p = model.encoder_q, model.encoder_p
    texts = q.embed(TEXTS, max_len=MAX_LEN)
    texts_k8 = q.embed(TEXTS, max_len=MAX_LEN, topk=8)
    texts_bow = q.embed(TEXTS, max_len=MAX_LEN, bow=True)
    encoding = q.encode(TEXTS, max_len=MAX_LEN)
    full_texts = q(**encoding)
    image_paths = [str(OUT / "images" / n) for n in IMAGES]
    pixels = torch.cat([p.load_image_file(f) for f in image_paths])
    images = p.embed(pixels)
    images_k16 = p.embed(pixels, topk=16)
    full_images = torch.nn.functional.normalize(
        vdr_image.elu1p((p(pixels) @ p.proj.t()).max(1)[0]))

    out = OUT / "vdr-tiny"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # The checkpoint as the published repository holds it: the Retriever's config.json, with
    # the public model ids where the tiny run had local paths, and the state dict.
    model.config.encoder_q["model_id"] = "bert-base-uncased"
    model.config.encoder_p["tokenizer_id"] = "bert-base-uncased"
    model.config.architectures = ["Retriever"]
    model.config.save_pretrained(out)
    state = {k: v.half() for k, v in model.state_dict().items()}
    torch.save(state, out / "pytorch_model.bin")

    doc = {
        "reference": "github.com/jzhoubu/vsearch 2496bf9 (Retriever, vdr_crossmodal_text/image)",
        "max_len": MAX_LEN,
        "texts": [
            {
                "text": t,
                "input_ids": encoding["input_ids"][i].tolist(),
                "lexicon": sparse(texts[i]),
                "lexicon_top8": sparse(texts_k8[i]),
                "bow": sparse(texts_bow[i]),
                "top32": top_terms(full_texts[i], 32),
                "norm": float(full_texts[i].norm()),
            }
            for i, t in enumerate(TEXTS)
        ],
        "images": [
            image_entry(
                n,
                pixels[i],
                pixels_sha256=hashlib.sha256(pixels[i].numpy().tobytes()).hexdigest(),
                lexicon=sparse(images[i]),
                lexicon_top16=sparse(images_k16[i]),
                top32=top_terms(full_images[i], 32),
            )
            for i, n in enumerate(IMAGES)
        ],
    }
    write_doc(OUT, "vdr.json", out, doc)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
