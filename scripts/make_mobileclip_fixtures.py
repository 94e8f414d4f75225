#!/usr/bin/env python3
"""Golden outputs of `open_clip`'s MobileCLIP for lexlip-model's MobileCLIP backbone test.

Run once, in the virtualenv of scripts/make_fixtures.py with open_clip and timm added (CI never
runs it; it has no torch):

    /tmp/venv-ref/bin/pip install open_clip_torch timm
    /tmp/venv-ref/bin/python scripts/make_mobileclip_fixtures.py

It writes, under model/tests/fixtures/:
  mobileclip-tiny/  a random tiny MobileCLIP in the layout of Apple's `apple/MobileCLIP-S1-OpenCLIP`
                    Hub repository: `open_clip_config.json` (the MobileCLIP-S1 config, made tiny),
                    `open_clip_model.safetensors` (open_clip's state dict, weights rounded to f16
                    and stored as f16) and a word-level `tokenizer.json` whose texts start with
                    `<|startoftext|>` and end with `<|endoftext|>`, the highest id (open_clip pools
                    the text tower at the largest id). The image tower is timm's `fastvit_mci0`
                    with one block per stage and widths 8, 16, 32, 64 (MobileCLIP's FastViT MCi:
                    RepMixer stages, then attention with a conditional position encoding).
  mobileclip-tiny-folded.safetensors
                    the same weights with the image tower folded for inference by timm's
                    `reparameterize_model` (`reparam_conv` layers), in f32: lexlip loads both forms.
  mobileclip.json   token ids padded to the context length (16) with 0, as open_clip's tokenizer
                    pads, and the L2-normalised text and image embeddings of a few texts and of the
                    64 × 64 fixture images (MobileCLIP normalises nothing: mean 0, std 1).
"""

import copy
import sys
from pathlib import Path

import open_clip
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from timm.utils.model import reparameterize_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import (  # noqa: E402
    DUAL_TEXTS, OUT, clip_tokenizer, padded_ids, pixels_of, randomize, write_embeddings, write_json,
)

CONTEXT = 16
EMBED = 32
SIZE = 64


def randomize_buffers(model):
    """BatchNorm running statistics away from 0 / 1, so that folding them is tested."""
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            b.copy_((0.1 * torch.randn_like(b)).half().float())
        elif name.endswith("running_var"):
            b.copy_((0.5 + torch.rand_like(b)).half().float())


def main():
    torch.manual_seed(11)
    vision_cfg = {"timm_model_name": "fastvit_mci0", "timm_model_pretrained": False, "timm_pool": "avg",
                  "timm_proj": None, "timm_drop": 0.0, "timm_drop_path": 0.0, "image_size": SIZE}
    text_cfg = {"context_length": CONTEXT, "vocab_size": 1000, "width": 32, "heads": 2, "layers": 2,
                "no_causal_mask": True}
    model = open_clip.CustomTextCLIP(embed_dim=EMBED, vision_cfg=vision_cfg, text_cfg=text_cfg)
    # MCi0 made tiny: the same block types, one block per stage.
    model.visual.trunk = timm.create_model(
        "fastvit_mci0", pretrained=False, num_classes=EMBED, global_pool="avg",
        layers=(1, 1, 1, 1), embed_dims=(8, 16, 32, 64))
    model.eval()
    with torch.no_grad():
        randomize(model)
        # BatchNorm scales near 1 and layer scales near 0.3 keep a random deep net's activations
        # in range (randomize draws them around 0).
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.copy_((0.3 + 0.05 * torch.randn_like(p)).half().float())
            elif p.dim() == 1 and name.endswith("weight") and "visual" in name:
                p.copy_((1.0 + 0.1 * torch.randn_like(p)).half().float())
        randomize_buffers(model)

    dst = OUT / "mobileclip-tiny"
    dst.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    save_file(state, str(dst / "open_clip_model.safetensors"))
    tk = clip_tokenizer()
    tk.save(str(dst / "tokenizer.json"))
    mean, std = [0.0] * 3, [1.0] * 3
    write_json(
        dst / "open_clip_config.json",
        {"model_cfg": {"embed_dim": EMBED, "vision_cfg": vision_cfg, "text_cfg": text_cfg, "custom_text": True},
         "preprocess_cfg": {"mean": mean, "std": std, "interpolation": "bilinear", "resize_mode": "shortest"}},
    )

    texts = DUAL_TEXTS
    ids = padded_ids(tk, texts, CONTEXT, 0)
    paths = [OUT / "images" / f"img{i}_{SIZE}.png" for i in range(2)]
    with torch.no_grad():
        text_emb = F.normalize(model.encode_text(torch.tensor(ids)), dim=-1)
        px = torch.stack([pixels_of(p, mean, std) for p in paths])
        img_emb = F.normalize(model.encode_image(px), dim=-1)
    write_embeddings(OUT / "mobileclip.json", texts, ids, text_emb, paths, img_emb)
    folded = copy.deepcopy(model)
    folded.visual.trunk = reparameterize_model(folded.visual.trunk)
    with torch.no_grad():
        again = F.normalize(folded.encode_image(px), dim=-1)
    assert torch.allclose(again, img_emb, atol=1e-5), (again - img_emb).abs().max()
    state = {k: v.detach().float().contiguous() for k, v in folded.state_dict().items()
             if k.startswith("visual.") and not k.endswith("num_batches_tracked")}
    state.update({k: v.detach().half().contiguous() for k, v in folded.state_dict().items()
                  if not k.startswith("visual.")})
    save_file(state, str(OUT / "mobileclip-tiny-folded.safetensors"))
    print(f"written {dst} and {OUT / 'mobileclip.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
