#!/usr/bin/env python3
"""PyTorch reference of the MaskVLM re-ranker for `model/train/tests/rerank_vs_torch.rs`.

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

Writes model/train/tests/fixtures/rerank_vs_torch.safetensors: the parameters under their
served names (`fusion.*`, `itm.*`) and training names (`mlm.*`, `mim.*`), float32; inputs
`in.text` (P, NT, H), `in.mask` (P, NT), `in.image` (P, NI, HI), `in.word_embeddings`,
`in.labels` (3 ITM labels per … , i64), `in.mlm_rows`, `in.mlm_targets`, `in.mim_rows`,
`in.mim_pixels`; outputs `out.itm_logits`, `out.itm`, `out.mlm`, `out.mim`, `out.itc` (float64) and
`out.grad.modality`, `out.grad.mlm_bias` (gradients of itm + mlm + mim + itc).
"""

import math
import os

import torch
from safetensors.torch import save_file

torch.manual_seed(7)
D = torch.float64
P, NT, NI = 6, 5, 5  # pairs, text tokens, image tokens (1 + 4 patches)
H, HI, HEADS, INTER, LAYERS = 16, 10, 2, 32, 2
VOCAB, PIXELS = 50, 12  # 3 channels × 2 × 2 patches
EPS = 1e-12


def rand(*shape, std=0.5):
    return (torch.randn(*shape, dtype=D) * std).requires_grad_(True)


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
    p = f"fusion.encoder.layer.{i}."
    for name, (o, n) in {
        "attention.self.query": (H, H),
        "attention.self.key": (H, H),
        "attention.self.value": (H, H),
        "attention.output.dense": (H, H),
        "intermediate.dense": (INTER, H),
        "output.dense": (H, INTER),
    }.items():
        params[p + name + ".weight"] = rand(o, n, std=0.3)
        params[p + name + ".bias"] = rand(o, std=0.1)
    for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
        params[p + name + ".weight"] = (1 + torch.randn(H, dtype=D) * 0.1).requires_grad_(True)
        params[p + name + ".bias"] = rand(H, std=0.1)

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


def linear(x, name):
    return x @ params[name + ".weight"].T + params[name + ".bias"]


def layer_norm(x, name):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * params[name + ".weight"] + params[name + ".bias"]


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def bert_layer(x, bias, p):
    b, n, _ = x.shape
    d = H // HEADS

    def heads(t):
        return t.view(b, n, HEADS, d).transpose(1, 2)

    q = heads(linear(x, p + "attention.self.query"))
    k = heads(linear(x, p + "attention.self.key"))
    v = heads(linear(x, p + "attention.self.value"))
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1)
    ctx = (att @ v).transpose(1, 2).reshape(b, n, H)
    x = layer_norm(linear(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
    mlp = linear(gelu(linear(x, p + "intermediate.dense")), p + "output.dense")
    return layer_norm(mlp + x, p + "output.LayerNorm")


mod = params["fusion.modality_embeddings.weight"]
t = linear(text, "fusion.text_projection") + mod[0]
i = linear(image, "fusion.image_projection") + mod[1]
x = layer_norm(torch.cat([t, i], 1), "fusion.LayerNorm")
full = torch.cat([mask, torch.ones(P, NI, dtype=D)], 1)
bias = ((1 - full) * torch.finfo(torch.float32).min)[:, None, None, :]
for layer in range(LAYERS):
    x = bert_layer(x, bias, f"fusion.encoder.layer.{layer}.")
itm_logits = linear(x[:, 0] * x[:, NT], "itm")
itm = torch.nn.functional.cross_entropy(itm_logits, labels)
flat = x.reshape(P * (NT + NI), H)
h = layer_norm(gelu(linear(flat[mlm_rows], "mlm.dense")), "mlm.LayerNorm")
mlm_logits = h @ word.T + params["mlm.bias"]
mlm = torch.nn.functional.cross_entropy(mlm_logits, mlm_targets)
mim = (linear(flat[mim_rows], "mim") - mim_pixels).abs().mean()
# ITC (MaskVLM's, here on the fusion encoder's projected inputs): masked mean of the projected
# text states, mean of the projected image states, L2-normalised, symmetric InfoNCE at 0.07.
tp = linear(text, "fusion.text_projection")
t_feat = (tp * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True)
i_feat = linear(image, "fusion.image_projection").mean(1)
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
    os.path.dirname(__file__), "..", "model", "train", "tests", "fixtures", "rerank_vs_torch.safetensors"
)
save_file(out, path)
print(f"wrote {os.path.normpath(path)}: itm {itm.item():.6f} mlm {mlm.item():.6f} mim {mim.item():.6f}")
