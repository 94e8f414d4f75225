#!/usr/bin/env python3
"""PyTorch reference of the MaskVLM re-ranker for `train/tests/rerank_vs_torch.rs`.

Written from the paper (MaskVLM, ICLR 2023, sec. 3.1-3.2, eq. 1), not from the Rust code: text
and image tower states are projected to the fusion width, tagged with a modality embedding,
layer-normed and concatenated (text first); post-norm BERT layers (exact-erf GELU) attend over
both with the text padding masked out. The ITM head is a linear layer on the element-wise
product of the fused text [CLS] (position 0) and image [CLS] (the first image position), with
cross-entropy against match / no match. MLM: dense + GELU + LayerNorm, then the (tied, frozen)
word embeddings plus a bias, cross-entropy at the masked text positions. MIM: a linear layer to
the raw pixels of each masked patch, mean absolute error (L1) over the masked pixels. ITC:
symmetric InfoNCE at 0.07 of the pooled, projected tower states.

Everything is evaluated in float64 on fixed random tensors (seeded); the Rust test loads the
weights into both the training model and the served fusion encoder and compares ITM logits,
the three losses and the gradients of their sum with respect to two parameters. CI never runs
this.

Regenerate (torch is only needed here; the CPU build is enough):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_rerank_fixtures.py

Writes train/tests/fixtures/rerank_vs_torch.safetensors: the parameters under their
served names (`fusion.*`, `itm.*`) and training names (`mlm.*`, `mim.*`), float32; inputs
`in.text` (P, NT, H), `in.mask` (P, NT), `in.image` (P, NI, HI), `in.word_embeddings`,
`in.labels` (3 ITM labels per … , i64), `in.mlm_rows`, `in.mlm_targets`, `in.mim_rows`,
`in.mim_pixels`; outputs `out.itm_logits`, `out.itm`, `out.mlm`, `out.mim`, `out.itc` (float64) and
`out.grad.modality`, `out.grad.mlm_bias` (gradients of itm + mlm + mim + itc).
"""

import os

import torch
from safetensors.torch import save_file

from fixture_io import bert_layer, bert_layer_params, gelu, linear, norm, rand

torch.manual_seed(7)
D = torch.float64
P, NT, NI = 6, 5, 5  # pairs, text tokens, image tokens (1 + 4 patches)
H, HI, HEADS, INTER, LAYERS = 16, 10, 2, 32, 2
VOCAB, PIXELS = 50, 12  # 3 channels × 2 × 2 patches


params = {
    "fusion.text_projection.weight": rand(H, H),
    "fusion.text_projection.bias": rand(H, std=0.1),
    "fusion.image_projection.weight": rand(H, HI),
    "fusion.image_projection.bias": rand(H, std=0.1),
    "fusion.modality_embeddings.weight": rand(2, H),
    "fusion.LayerNorm.weight": (1 + torch.randn(H, dtype=D) * 0.1).requires_grad_(True),
    "fusion.LayerNorm.bias": rand(H, std=0.1),
    "itm.weight": rand(2, H),
    "itm.bias": rand(2, std=0.1),
    "mlm.dense.weight": rand(H, H),
    "mlm.dense.bias": rand(H, std=0.1),
    "mlm.LayerNorm.weight": (1 + torch.randn(H, dtype=D) * 0.1).requires_grad_(True),
    "mlm.LayerNorm.bias": rand(H, std=0.1),
    "mlm.bias": rand(VOCAB, std=0.1),
    "mim.weight": rand(PIXELS, H),
    "mim.bias": rand(PIXELS, std=0.1),
}
for i in range(LAYERS):
    bert_layer_params(params, f"fusion.encoder.layer.{i}.", H, INTER)

text = torch.randn(P, NT, H, dtype=D)
image = torch.randn(P, NI, HI, dtype=D)
mask = torch.ones(P, NT, dtype=D)
mask[1, 3:] = 0
mask[4, 2:] = 0
word = torch.randn(VOCAB, H, dtype=D)
labels = torch.tensor([1, 1, 0, 0, 1, 0])
mlm_rows = torch.tensor([1, 2, 11, (3 * (NT + NI)) + 4, (5 * (NT + NI)) + 1])
mlm_targets = torch.tensor([3, 17, 42, 8, 0])
mim_rows = torch.tensor([NT + 1, NT + 3, (2 * (NT + NI)) + NT + 2, (5 * (NT + NI)) + NT + 4])
mim_pixels = torch.randn(len(mim_rows), PIXELS, dtype=D)


mod = params["fusion.modality_embeddings.weight"]
t = linear(text, params, "fusion.text_projection") + mod[0]
i = linear(image, params, "fusion.image_projection") + mod[1]
x = norm(torch.cat([t, i], 1), params, "fusion.LayerNorm")
full = torch.cat([mask, torch.ones(P, NI, dtype=D)], 1)
bias = ((1 - full) * torch.finfo(torch.float32).min)[:, None, None, :]
for layer in range(LAYERS):
    x = bert_layer(params, f"fusion.encoder.layer.{layer}.", x, HEADS, bias=bias)
itm_logits = linear(x[:, 0] * x[:, NT], params, "itm")
itm = torch.nn.functional.cross_entropy(itm_logits, labels)
flat = x.reshape(P * (NT + NI), H)
h = norm(gelu(linear(flat[mlm_rows], params, "mlm.dense")), params, "mlm.LayerNorm")
mlm_logits = h @ word.T + params["mlm.bias"]
mlm = torch.nn.functional.cross_entropy(mlm_logits, mlm_targets)
mim = (linear(flat[mim_rows], params, "mim") - mim_pixels).abs().mean()
# ITC (MaskVLM's, here on the fusion encoder's projected inputs): masked mean of the projected
# text states, mean of the projected image states, L2-normalised, symmetric InfoNCE at 0.07.
tp = linear(text, params, "fusion.text_projection")
t_feat = (tp * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
i_feat = linear(image, params, "fusion.image_projection").mean(1)
t_feat = torch.nn.functional.normalize(t_feat, dim=-1)
i_feat = torch.nn.functional.normalize(i_feat, dim=-1)
sim = i_feat @ t_feat.T / 0.07
target = torch.arange(P)
itc = (torch.nn.functional.cross_entropy(sim, target) + torch.nn.functional.cross_entropy(sim.T, target)) / 2
(itm + mlm + mim + itc).backward()

f32 = torch.float32
out = {k: v.detach().to(f32).contiguous() for k, v in params.items()}
out.update(
    {
        "in.text": text.to(f32),
        "in.image": image.to(f32),
        "in.mask": mask.to(f32),
        "in.word_embeddings": word.to(f32),
        "in.labels": labels,
        "in.mlm_rows": mlm_rows,
        "in.mlm_targets": mlm_targets,
        "in.mim_rows": mim_rows,
        "in.mim_pixels": mim_pixels.to(f32),
        "out.itm_logits": itm_logits.detach(),
        "out.itm": itm.detach(),
        "out.mlm": mlm.detach(),
        "out.mim": mim.detach(),
        "out.itc": itc.detach(),
        "out.grad.modality": params["fusion.modality_embeddings.weight"].grad.to(f32),
        "out.grad.mlm_bias": params["mlm.bias"].grad.to(f32),
    }
)
path = os.path.join(
    os.path.dirname(__file__), "..", "train", "tests", "fixtures", "rerank_vs_torch.safetensors"
)
save_file(out, path)
print(f"wrote {os.path.normpath(path)}: itm {itm.item():.6f} mlm {mlm.item():.6f} mim {mim.item():.6f}")
