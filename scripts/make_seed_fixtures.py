#!/usr/bin/env python3
"""PyTorch references of the seed papers' extra losses for `train/tests/losses_vs_torch.rs`:
GRIT-VLP's ITC consistency loss, COOKIE's single-modal contrastive loss and ConLIP's decoupled
contrastive loss.

Written from the paper (GRIT-VLP, ECCV 2022, sec. 4.2 eq. 6), not from the Rust code: for a batch
of image and text representations, p_v2t(i) = softmax_j(v_i . t_j / tau) and
p_t2v(i) = softmax_j(t_i . v_j / tau); the loss (without its lambda) is
(KL(sg(p_v2t) || p_t2v) + KL(sg(p_t2v) || p_v2t)) / 2, averaged over the batch. Evaluated in
float64 on fixed random tensors (seeded): non-negative lexicon-like rows (LexLIP) and unit-length
dense rows (the dense objective). COOKIE (ICCV 2021, sec. 3.3 eq. 8-10): two views of the same
items (two augmentations of an image; a caption and its masked copy) as the positives of a
symmetric in-batch InfoNCE at tau, (CE(a b^T / tau) + CE(b a^T / tau)) / 2 with the diagonal as
the targets. CI never runs this.

Regenerate (torch is only needed here; the CPU build is enough):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_seed_fixtures.py

Writes train/tests/fixtures/seeds_vs_torch.safetensors. Names, for CASE in lexicon, dense
(ITC consistency), cookie_lexicon, cookie_dense (single-modal InfoNCE), dcl_dense (ConLIP's
decoupled contrastive loss, ConLIP eq. 10-12, in-batch); moco_infonce and moco_dcl (ConLIP's
loss with MoCo queues, eq. 9-12) add CASE.key_image, CASE.key_text, CASE.queue_image and
CASE.queue_text:
  CASE.image, CASE.text    (batch, dim) inputs, float32
  CASE.tau                 float64 scalar
  CASE.loss                float64 scalar
  CASE.grad_image, CASE.grad_text   gradients of the loss, float32
"""

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "train" / "tests" / "fixtures" / "seeds_vs_torch.safetensors"

gen = torch.Generator().manual_seed(20220722)


def consistency(image, text, tau):
    """Eq. 6 without lambda: the two KL terms with stop-gradient targets, mean over pairs."""
    sim = image @ text.t() / tau
    p_v2t = F.softmax(sim, dim=1)  # row i: image i over the texts
    p_t2v = F.softmax(sim.t(), dim=1)  # row i: text i over the images
    log_v2t = F.log_softmax(sim, dim=1)
    log_t2v = F.log_softmax(sim.t(), dim=1)

    def kl(target, log_target, log_q):
        target, log_target = target.detach(), log_target.detach()
        return (target * (log_target - log_q)).sum(dim=1)

    per_pair = kl(p_v2t, log_v2t, log_t2v) + kl(p_t2v, log_t2v, log_v2t)
    return per_pair.mean() / 2


def single_modal(a, b, tau):
    """COOKIE eq. 8-10: symmetric in-batch InfoNCE between two views; row i of each is a pair."""
    logits = a @ b.t() / tau
    target = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def dcl(image, text, tau):
    """ConLIP eq. 10-12 (DCL): -s_ii/tau + log sum_{j != i} exp(s_ij/tau) in both directions,
    mean over the batch; the two directions averaged (ConLIP sums them)."""
    sim = image @ text.t() / tau
    eye = torch.eye(sim.shape[0], dtype=torch.bool)

    def side(s):
        positive = s.diagonal()
        negatives = torch.logsumexp(s.masked_fill(eye, float("-inf")), dim=1)
        return (negatives - positive).mean()

    return (side(sim) + side(sim.t())) / 2


def momentum_contrast(image, text, key_image, key_text, queue_image, queue_text, tau, decoupled):
    """ConLIP eq. 9-12 with MoCo queues: each image against [its batch's text keys; the text
    queue] (its own key the positive) and symmetrically; InfoNCE (eq. 9) or DCL (eq. 10-11).
    Keys and queues carry no gradient; the two directions averaged."""

    def side(q, keys):
        logits = q @ keys.t() / tau
        b = q.shape[0]
        target = torch.arange(b)
        if not decoupled:
            return F.cross_entropy(logits, target)
        positive = logits[target, target]
        mask = torch.zeros_like(logits, dtype=torch.bool)
        mask[target, target] = True
        return (torch.logsumexp(logits.masked_fill(mask, float("-inf")), dim=1) - positive).mean()

    i2t = side(image, torch.cat([key_text, queue_text]).detach())
    t2i = side(text, torch.cat([key_image, queue_image]).detach())
    return (i2t + t2i) / 2


def momentum_case(name, decoupled, out):
    b, n, d = 4, 8, 6
    unit = lambda rows: F.normalize(torch.randn(rows, d, generator=gen), dim=1).float().double()
    image, text = unit(b).requires_grad_(True), unit(b).requires_grad_(True)
    key_image, key_text, queue_image, queue_text = unit(b), unit(b), unit(n), unit(n)
    loss = momentum_contrast(image, text, key_image, key_text, queue_image, queue_text, 0.1, decoupled)
    gi, gt = torch.autograd.grad(loss, (image, text))
    for k, v in [("image", image), ("text", text), ("key_image", key_image), ("key_text", key_text),
                 ("queue_image", queue_image), ("queue_text", queue_text)]:
        out[f"{name}.{k}"] = v.detach().float()
    out[f"{name}.tau"] = torch.tensor(0.1, dtype=torch.float64)
    out[f"{name}.loss"] = loss.detach()
    out[f"{name}.grad_image"] = gi.float()
    out[f"{name}.grad_text"] = gt.float()


def case(name, image, text, tau, out, loss_fn=consistency):
    image = image.float().double().requires_grad_(True)
    text = text.float().double().requires_grad_(True)
    loss = loss_fn(image, text, tau)
    gi, gt = torch.autograd.grad(loss, (image, text))
    out[f"{name}.image"] = image.detach().float()
    out[f"{name}.text"] = text.detach().float()
    out[f"{name}.tau"] = torch.tensor(tau, dtype=torch.float64)
    out[f"{name}.loss"] = loss.detach()
    out[f"{name}.grad_image"] = gi.float()
    out[f"{name}.grad_text"] = gt.float()


def main():
    out = {}
    b, v = 6, 20
    # Lexicon rows: sparse, non-negative (relu'd, log(1 + .)), as LexLIP's p_v and p_l.
    lex = lambda: torch.log1p(torch.relu(torch.randn(b, v, generator=gen) * 1.5 - 0.5))
    case("lexicon", lex(), lex(), 0.5, out)
    d = 8
    dense = lambda: F.normalize(torch.randn(b, d, generator=gen), dim=1)
    case("dense", dense(), dense(), 0.05, out)
    case("cookie_lexicon", lex(), lex(), 0.5, out, single_modal)
    case("cookie_dense", dense(), dense(), 0.05, out, single_modal)
    case("dcl_dense", dense(), dense(), 0.05, out, dcl)
    momentum_case("moco_infonce", False, out)
    momentum_case("moco_dcl", True, out)
    save_file(out, str(OUT))
    print(f"wrote {OUT}: " + ", ".join(f"{k}={float(out[k]):.6f}" for k in out if k.endswith(".loss")))


if __name__ == "__main__":
    main()
