#!/usr/bin/env python3
"""PyTorch references of the lexicon recipe's objectives (issue 35) for
`train/tests/losses_vs_torch.rs`: top-K pooling, caption-word grounding (STAIR, EMNLP
2023, its first stage: image lexicons contrasted with IDF-weighted bags of caption words), and
BaCo with a FLOPS weight per side.

Each piece is written here from its description (torch.topk for the cut, a scatter-add bag of
words for the targets), not from the Rust code, evaluated in float64 on fixed small random
tensors (seeded). Inputs (float32), expected losses (float64) and gradients with respect to the
inputs (float32) go to one small safetensors file the Rust test reads; CI never runs this.

Regenerate (torch is only needed here):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_lexicon_fixtures.py

Writes train/tests/fixtures/lexicon_vs_torch.safetensors. Names:
  config.*   tau, lambda_image, lambda_text, grounding weight (f64), k (i64)
  input.*    image logits (batch, tokens, vocab), text lexicon, caption ids and mask, idf
  expect.*   the cut lexicon, targets, losses (f64 scalars) and gradients (f32)
"""

from pathlib import Path

import torch

from fixture_io import caption_inputs, entries, f32, f64_scalar, i64_scalar, save_tensors

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "train" / "tests" / "fixtures" / "lexicon_vs_torch.safetensors"

B, M, V, T = 4, 3, 24, 6  # batch, image tokens, vocabulary, caption tokens
K = 5
TAU, LAMBDA_IMAGE, LAMBDA_TEXT, GROUNDING = 0.2, 0.3, 0.05, 0.7

gen = torch.Generator().manual_seed(20231206)


def randn(*shape, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen) * scale + shift).float().double()


def splade(logits):
    """p = log(1 + max_t relu(S_t)) (LexLIP eq. 6)."""
    return torch.log1p(torch.clamp(logits, min=0).amax(dim=1))


def top_k(p, k):
    """Keep the k largest weights of each row; the rest become 0."""
    idx = p.topk(k, dim=1).indices
    keep = torch.zeros_like(p).scatter(1, idx, 1.0)
    return p * keep


def grounding_targets(ids, mask, idf):
    """The caption's bag of words, every occurrence weighted by its term's IDF (0: no target),
    scaled to unit length; rows without a target term are left out."""
    bag = torch.zeros(ids.shape[0], V, dtype=torch.float64)
    bag.scatter_add_(1, ids, idf[ids] * mask)
    has = (bag.sum(dim=1) > 0).double()
    return bag / bag.norm(dim=1, keepdim=True).clamp_min(1e-12), has


def grounding(pv, bags, has):
    """Symmetric in-batch InfoNCE of image lexicons against the caption bags at TAU, each row's
    own caption (image) the positive; mean over rows with targets, both directions."""
    sim = pv @ bags.T / TAU
    diag = torch.arange(B)
    i2t = torch.nn.functional.cross_entropy(sim, diag, reduction="none")
    t2i = torch.nn.functional.cross_entropy(sim.T, diag, reduction="none")
    return ((i2t + t2i) * has).sum() / (2 * has.sum()).clamp(min=1)


def flops(p):
    return (p.mean(dim=0) ** 2).sum()


def baco(pv, pl):
    """In-batch contrastive both ways, each side with its own FLOPS weight (eq. 15-17)."""
    sim = pv @ pl.T / TAU
    diag = torch.arange(B)
    i2t = torch.nn.functional.cross_entropy(sim, diag)
    t2i = torch.nn.functional.cross_entropy(sim.T, diag)
    return ((i2t + LAMBDA_IMAGE * flops(pv)) + (t2i + LAMBDA_TEXT * flops(pl))) / 2


def main():
    image_logits = randn(B, M, V, scale=1.5, shift=0.3).requires_grad_()
    pl = torch.clamp(randn(B, V, scale=1.0), min=0).requires_grad_()
    # Caption ids: [CLS]=0 and [SEP]=1 carry idf 0; padding (mask 0) never counts; one caption
    # repeats a word (its weight doubles), one has no target term at all.
    ids = torch.tensor(
        [[0, 5, 7, 9, 1, 2], [0, 7, 7, 11, 1, 2], [0, 1, 2, 2, 2, 2], [0, 13, 5, 20, 22, 1]]
    )
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0], [1] * 6])
    idf = torch.rand(V, generator=gen).double() * 3 + 0.5
    idf[0] = idf[1] = idf[2] = 0.0

    pv_full = splade(image_logits)
    pv = top_k(pv_full, K)
    targets, has = grounding_targets(ids, mask.double(), idf)
    g = grounding(pv_full, targets, has)  # before the cut: caption words outside the top K rise
    contrastive = baco(pv, pl)
    total = contrastive + GROUNDING * g
    grad_logits, grad_pl = torch.autograd.grad(total, [image_logits, pl], retain_graph=True)
    grad_ground = torch.autograd.grad(g, [image_logits])[0]

    out = {
        **entries(
            "config", f64_scalar, tau=TAU, lambda_image=LAMBDA_IMAGE, lambda_text=LAMBDA_TEXT,
            grounding=GROUNDING,
        ),
        "config.k": i64_scalar(K),
        **entries("input", f32, image_logits=image_logits, pl=pl),
        **caption_inputs(ids, mask, idf),
        **entries("expect", f32, pv=pv, targets=targets, has=has),
        "expect.grounding": g.detach().contiguous(),
        "expect.baco": contrastive.detach().contiguous(),
        "expect.total": total.detach().contiguous(),
        "expect.grad_image_logits": f32(grad_logits),
        "expect.grad_pl": f32(grad_pl),
        "expect.grounding.grad_image_logits": f32(grad_ground),
    }
    save_tensors(OUT, out)
    print(f"wrote {OUT} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
