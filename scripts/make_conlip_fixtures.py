#!/usr/bin/env python3
"""PyTorch reference of ConLIP's token-level objectives for `train/tests/conlip_vs_torch.rs`.

Written from the paper (ConLIP, paper 000 sec. 3.1-3.2, eq. 5-7), not from the Rust code. Two
pre-training heads, each one post-norm transformer block whose queries cross-attend to the other
modality (attention, residual, LayerNorm; then GELU feed-forward, residual, LayerNorm; exact-erf
GELU):

- MLM: queries are the text tower's states of the masked caption; the prediction is BERT's MLM
  head (dense + GELU + LayerNorm, then the tied word embeddings plus a bias), cross-entropy at
  the masked positions.
- MIM: queries are the image tower's states of the masked image; a linear layer predicts each
  masked patch's raw pixels, mean absolute error (SimMIM's L1).

What the heads attend to:

- vanilla: the other side's states from its complete input;
- conditioned (ConMLM, ConMIM): [h_cls of the complete input; the masked input's other states],
  so only the [CLS] carries the complete other side.

The text padding is masked out of the MIM head's attention. Everything is evaluated in float64
on fixed random tensors (seeded). CI never runs this.

Regenerate (torch is only needed here; the CPU build is enough):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_conlip_fixtures.py

Writes train/tests/fixtures/conlip_vs_torch.safetensors: the head parameters under their
training names (`text.*`, `cls.*`, `image.*`, `mim.*`), float32; inputs `in.text`,
`in.text_masked` (B, NT, HT), `in.mask` (B, NT), `in.image`, `in.image_masked` (B, NI, HI),
`in.word_embeddings`, `in.text_rows`, `in.text_targets`, `in.patch_rows`, `in.patch_targets`;
outputs (float64) `out.KIND.mlm`, `out.KIND.mim` for KIND in vanilla, conditioned, and float32
gradients of the conditioned mlm + mim: `out.grad.text`, `out.grad.text_masked`, `out.grad.image`,
`out.grad.image_masked`, `out.grad.key` (text.crossattention.self.key.weight), `out.grad.mim`
(mim.weight).
"""

import os

import torch
from safetensors.torch import save_file

from fixture_io import bert_layer, bert_layer_params, gelu, linear, norm, norm_params, rand

torch.manual_seed(11)
D = torch.float64
B, NT, NI = 3, 5, 5  # pairs, text tokens, image tokens (1 + 2 x 2 patches)
HT, HI = 16, 12  # text and image widths
HEADS, INTER_T, INTER_I = 2, 24, 20
VOCAB, PIXELS = 30, 48  # 3 channels x 4 x 4 pixels per patch


params = {}
bert_layer_params(params, "text.", HT, INTER_T, HI, "crossattention")
bert_layer_params(params, "image.", HI, INTER_I, HT, "crossattention")
params["cls.predictions.transform.dense.weight"] = rand(HT, HT)
params["cls.predictions.transform.dense.bias"] = rand(HT, std=0.1)
norm_params(params, "cls.predictions.transform.LayerNorm", HT)
params["cls.predictions.bias"] = rand(VOCAB, std=0.1)
params["mim.weight"] = rand(PIXELS, HI)
params["mim.bias"] = rand(PIXELS, std=0.1)
params["mask_token"] = rand(HI)  # not read by the losses; loaded by the heads

text = torch.randn(B, NT, HT, dtype=D, requires_grad=True)
text_masked = torch.randn(B, NT, HT, dtype=D, requires_grad=True)
mask = torch.ones(B, NT, dtype=D)
mask[2, 3:] = 0
image = torch.randn(B, NI, HI, dtype=D, requires_grad=True)
image_masked = torch.randn(B, NI, HI, dtype=D, requires_grad=True)
word = torch.randn(VOCAB, HT, dtype=D)
text_rows = torch.tensor([1, 3, NT + 2, 2 * NT + 1])
text_targets = torch.tensor([4, 17, 9, 28])
patch_rows = torch.tensor([1 + 0, 1 + 3, NI + 1 + 2, 2 * NI + 1 + 1, 2 * NI + 1 + 2])
patch_targets = torch.randn(len(patch_rows), PIXELS, dtype=D)


def cross_layer(queries, context, bias, p):
    return bert_layer(params, p + ".", queries, HEADS, context, "crossattention", bias)


def losses(conditioned):
    if conditioned:
        image_context = torch.cat([image[:, :1], image_masked[:, 1:]], 1)
        text_context = torch.cat([text[:, :1], text_masked[:, 1:]], 1)
    else:
        image_context, text_context = image, text
    x = cross_layer(text_masked, image_context, None, "text").reshape(B * NT, HT)[text_rows]
    h = gelu(linear(x, params, "cls.predictions.transform.dense"))
    h = norm(h, params, "cls.predictions.transform.LayerNorm")
    logits = h @ word.T + params["cls.predictions.bias"]
    mlm = torch.nn.functional.cross_entropy(logits, text_targets)
    bias = ((1 - mask) * torch.finfo(torch.float32).min)[:, None, None, :]
    y = cross_layer(image_masked, text_context, bias, "image").reshape(B * NI, HI)[patch_rows]
    mim = (linear(y, params, "mim") - patch_targets).abs().mean()
    return mlm, mim


vanilla_mlm, vanilla_mim = losses(False)
con_mlm, con_mim = losses(True)
(con_mlm + con_mim).backward()

f32 = torch.float32
out = {k: v.detach().to(f32).contiguous() for k, v in params.items()}
out.update(
    {
        "in.text": text.detach().to(f32),
        "in.text_masked": text_masked.detach().to(f32),
        "in.mask": mask.to(f32),
        "in.image": image.detach().to(f32),
        "in.image_masked": image_masked.detach().to(f32),
        "in.word_embeddings": word.to(f32),
        "in.text_rows": text_rows,
        "in.text_targets": text_targets,
        "in.patch_rows": patch_rows,
        "in.patch_targets": patch_targets.to(f32),
        "out.vanilla.mlm": vanilla_mlm.detach(),
        "out.vanilla.mim": vanilla_mim.detach(),
        "out.conditioned.mlm": con_mlm.detach(),
        "out.conditioned.mim": con_mim.detach(),
        "out.grad.text": text.grad.to(f32),
        "out.grad.text_masked": text_masked.grad.to(f32),
        "out.grad.image": image.grad.to(f32),
        "out.grad.image_masked": image_masked.grad.to(f32),
        "out.grad.key": params["text.crossattention.self.key.weight"].grad.to(f32),
        "out.grad.mim": params["mim.weight"].grad.to(f32),
    }
)
path = os.path.join(
    os.path.dirname(__file__), "..", "train", "tests", "fixtures", "conlip_vs_torch.safetensors"
)
save_file(out, path)
print(
    f"wrote {os.path.normpath(path)}: vanilla mlm {vanilla_mlm.item():.6f} mim {vanilla_mim.item():.6f}, "
    f"conditioned mlm {con_mlm.item():.6f} mim {con_mim.item():.6f}"
)
