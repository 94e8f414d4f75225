#!/usr/bin/env python3
"""Golden outputs of the Hugging Face `transformers` SigLIP for lexlip-model's SigLIP backbone test.

Run once, in the virtualenv of scripts/make_fixtures.py (CI never runs it; it has no torch):

    /tmp/venv-ref/bin/python scripts/make_siglip_fixtures.py

It writes, under model/tests/fixtures/:
  siglip-tiny/   a random tiny SiglipModel (weights rounded to f16, stored as f16), a word-level
                 tokenizer whose texts end with `</s>` (id 1, also the padding id, as SigLIP's),
                 and a preprocessor_config.json (mean = std = 0.5, 32 × 32, resized without crop);
  siglip.json    token ids padded to the context length (16) and the L2-normalised text and image
                 embeddings of a few texts and of the 32 × 32 images the CLIP fixture uses.
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import SiglipConfig, SiglipModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import (  # noqa: E402
    DUAL_TEXTS, OUT, padded_ids, pixels_of, randomize, save_f16, write_embeddings, write_json,
)

CONTEXT = 16


def main():
    torch.manual_seed(7)
    words = ["<pad>", "</s>", "<unk>", "a", "photo", "of", "dog", "cat", "on", "the", "grass", "red", "car"]
    words += [f"w{i}" for i in range(1000 - len(words))]
    vocab = {w: i for i, w in enumerate(words)}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    # Both towers: 2 layers of width 32 (SigLIP compares their pooled states directly).
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
    text = {"vocab_size": 1000, "max_position_embeddings": CONTEXT, "pad_token_id": 1, "eos_token_id": 1}
    cfg = SiglipConfig(text_config={**tower, **text}, vision_config={**tower, "image_size": 32, "patch_size": 8})
    cfg._attn_implementation = "eager"
    model = SiglipModel(cfg).eval()
    randomize(model)
    dst = OUT / "siglip-tiny"
    save_f16(model, tk, dst)
    mean, std = [0.5] * 3, [0.5] * 3
    write_json(
        dst / "preprocessor_config.json",
        {"image_processor_type": "SiglipImageProcessor", "image_mean": mean, "image_std": std,
         "size": {"height": 32, "width": 32}, "do_resize": True},
    )
    texts = DUAL_TEXTS
    ids = padded_ids(tk, texts, CONTEXT, 1)
    with torch.no_grad():
        f = model.get_text_features(input_ids=torch.tensor(ids))
        text_emb = F.normalize(f, dim=-1)
        paths = [OUT / "images" / f"clip{i}_32.png" for i in range(2)]
        px = torch.stack([pixels_of(p, mean, std) for p in paths])
        img_emb = F.normalize(model.get_image_features(pixel_values=px), dim=-1)
    write_embeddings(OUT / "siglip.json", texts, ids, text_emb, paths, img_emb)
    print(f"written {dst} and {OUT / 'siglip.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
