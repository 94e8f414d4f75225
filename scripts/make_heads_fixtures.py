#!/usr/bin/env python3
"""PyTorch reference of the lexicon heads' step (`lexlip train --objective heads`, issue 37) for
`train/tests/heads.rs`: linear heads over frozen dense embeddings, SPLADE's
`log(1 + relu(.))` of the centred input, the allowed-term mask, top-K per side, sparse InfoNCE, distillation of the
dense similarities (KL both ways), FLOPS per side, caption-word grounding on both sides and the
caption-word likelihood on either head: a softmax of its logits (before the relu) over the
allowed words.

Written here from the description in train/src/objectives/heads/mod.rs (torch.topk for the cut,
torch.nn.functional.kl_div for the distillation), not from the Rust code; evaluated in float64
on fixed small random tensors (seeded). Inputs (float32), expected losses (float64) and
gradients with respect to the head parameters (float32) go to one small safetensors file the
Rust test reads; CI never runs this.

Regenerate (torch is only needed here):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_heads_fixtures.py

Writes train/tests/fixtures/heads_vs_torch.safetensors, and
heads_expansion_vs_torch.safetensors beside it: the same step with expansion control on the
text side (`--query-expansion 2`, template word 13), whose inputs are the first file's; and
heads_own_floor_vs_torch.safetensors: the step with the own-word floor (`--own-floor 0.4`) on
the top-K text lexicons, the same inputs and template word.
"""

from pathlib import Path

import torch
import torch.nn.functional as F

from fixture_io import caption_inputs, entries, f32, f64_scalar as scalar, i64_scalar, save_tensors

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "train" / "tests" / "fixtures" / "heads_vs_torch.safetensors"
# Expansion control (`--query-expansion`, issue 73) on the same inputs, in a file of its own.
OUT_EXPANSION = OUT.with_name("heads_expansion_vs_torch.safetensors")
EXPANSION, TEMPLATE = 2, [13]
# The own-word floor (`--own-floor`, issue 73), on the same inputs, in a third file.
OUT_FLOOR = OUT.with_name("heads_own_floor_vs_torch.safetensors")
OWN_FLOOR = 0.4

B, D, V, T = 4, 6, 20, 6  # batch, embedding dims, vocabulary, caption tokens
K_IMAGE, K_TEXT = 7, 5
TAU, TEACHER_TAU, DISTILL = 0.5, 0.1, 0.8
LAMBDA_IMAGE, LAMBDA_TEXT, GROUNDING = 0.03, 0.01, 0.6
CAPTION_WORDS, CAPTION_WORDS_TEXT, CAPTION_WORDS_TAU = 0.7, 0.4, 0.2

gen = torch.Generator().manual_seed(20241127)


def unit_rows(x):
    return x / x.norm(dim=1, keepdim=True)


def logits(x, c, w, b):
    return (x - c) @ w.T + b


def full_lexicon(x, c, w, b, allowed):
    return torch.log1p(torch.clamp(logits(x, c, w, b), min=0)) * allowed


def cut(p, k):
    idx = p.topk(k, dim=1).indices
    keep = torch.zeros_like(p).scatter(1, idx, 1.0)
    return p * keep


def in_batch(a, b, tau):
    sim = a @ b.T / tau
    diag = torch.arange(a.shape[0])
    return F.cross_entropy(sim, diag), F.cross_entropy(sim.T, diag)


def kl_rows(teacher, student):
    """KL(softmax(teacher) || softmax(student)) per row, mean over rows; no gradient to the
    teacher."""
    t = F.log_softmax(teacher, dim=1).detach()
    s = F.log_softmax(student, dim=1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean")


def flops(p):
    return (p.mean(dim=0) ** 2).sum()


def bags_of(ids, mask, idf):
    bag = torch.zeros(ids.shape[0], V, dtype=torch.float64)
    bag.scatter_add_(1, ids, idf[ids] * mask)
    has = (bag.sum(dim=1) > 0).double()
    return bag / bag.norm(dim=1, keepdim=True).clamp_min(1e-12), has


def grounding(p, bags, has):
    sim = p @ bags.T / TAU
    diag = torch.arange(B)
    i2t = F.cross_entropy(sim, diag, reduction="none")
    t2i = F.cross_entropy(sim.T, diag, reduction="none")
    return ((i2t + t2i) * has).sum() / (2 * has.sum()).clamp(min=1)


def caption_words(z, allowed, bags, has):
    """Cross-entropy of the caption's allowed target words as a distribution (IDF bag over its
    sum) against a softmax of the head's logits over the allowed words, mean over the rows
    with such words."""
    keep = allowed.bool()
    bags = bags * allowed
    mass = bags.sum(dim=1)
    has = has * (mass > 0).double()
    q = bags[:, keep] / mass.clamp_min(1e-12)[:, None]
    log_p = F.log_softmax(z[:, keep] / CAPTION_WORDS_TAU, dim=1)
    per_row = -(q * log_p).sum(dim=1)
    return (per_row * has).sum() / has.sum().clamp(min=1)


def own_words(full, ids, mask, words):
    """1 where a vocabulary term is one of a caption's own words: its tokens that `words`
    allows."""
    return torch.zeros_like(full).scatter_add(1, ids, mask.double()).gt(0).double() * words


def expansion_control(full, ids, mask, words, e):
    """A caption's own words with their weights, and the `e` strongest other allowed words."""
    own = own_words(full, ids, mask, words)
    return full * own + cut(full * words * (1 - own), e)


def own_floor(p, full, ids, mask, words, share):
    """A caption's own words that `full` weighs 0 get `share` of its strongest own word in
    `full`, held fixed (no gradient through the floor)."""
    own = own_words(full, ids, mask, words)
    strongest = (full * own).max(dim=1, keepdim=True).values.detach()
    return p + share * strongest * own * (full <= 0).double()


def step_total(pv, pl, full_v, full_l, zv, zl, xv, xl, bags, has, allowed):
    i2t, t2i = in_batch(pv, pl, TAU)
    teacher = xv @ xl.T / TEACHER_TAU
    student = pv @ pl.T / TAU
    kd = (kl_rows(teacher, student) + kl_rows(teacher.T, student.T)) / 2
    total = (i2t + t2i) / 2 + DISTILL * kd + LAMBDA_IMAGE * flops(pv) + LAMBDA_TEXT * flops(pl)
    total = total + GROUNDING * (grounding(full_v, bags, has) + grounding(full_l, bags, has))
    cw = caption_words(zv, allowed, bags, has)
    cw_text = caption_words(zl, allowed, bags, has)
    return total + CAPTION_WORDS * cw + CAPTION_WORDS_TEXT * cw_text


def head_grads(grads):
    """The gradients with respect to wv, bv, wl, bl (that order) under their fixture names."""
    return {f"expect.grad_{n}": f32(g) for n, g in zip(["wv", "bv", "wl", "bl"], grads)}


def main():
    f64 = lambda t: t.float().double()
    xv = f64(unit_rows(torch.randn(B, D, generator=gen)))
    xl = f64(unit_rows(xv + 0.6 * torch.randn(B, D, generator=gen)))
    cv = f64(xv.mean(dim=0))
    cl = f64(xl.mean(dim=0))
    words = unit_rows(torch.randn(V, D, generator=gen))
    wv = f64(words * 3 + 0.3 * torch.randn(V, D, generator=gen)).requires_grad_()
    bv = f64(0.2 * torch.randn(V, generator=gen)).requires_grad_()
    wl = f64(words * 3 + 0.3 * torch.randn(V, D, generator=gen)).requires_grad_()
    bl = f64(0.2 * torch.randn(V, generator=gen)).requires_grad_()
    allowed = torch.ones(V, dtype=torch.float64)
    allowed[[0, 1, 2, 9]] = 0.0
    ids = torch.tensor(
        [[0, 5, 7, 9, 1, 2], [0, 7, 7, 11, 1, 2], [0, 1, 2, 2, 2, 2], [0, 13, 5, 19, 17, 1]]
    )
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0], [1] * 6])
    idf = torch.rand(V, generator=gen).double() * 3 + 0.5
    idf[0] = idf[1] = idf[2] = 0.0

    full_v = full_lexicon(xv, cv, wv, bv, allowed)
    full_l = full_lexicon(xl, cl, wl, bl, allowed)
    pv, pl = cut(full_v, K_IMAGE), cut(full_l, K_TEXT)
    i2t, t2i = in_batch(pv, pl, TAU)
    student = pv @ pl.T / TAU
    teacher = xv @ xl.T / TEACHER_TAU
    kd = (kl_rows(teacher, student) + kl_rows(teacher.T, student.T)) / 2
    fv, fl = flops(pv), flops(pl)
    bags, has = bags_of(ids, mask.double(), idf)
    # Grounding trains the lexicons before the top-K cut.
    gv, gl = grounding(full_v, bags, has), grounding(full_l, bags, has)
    total = (i2t + t2i) / 2 + DISTILL * kd + LAMBDA_IMAGE * fv + LAMBDA_TEXT * fl
    total = total + GROUNDING * (gv + gl)
    # ...on each head's logits, before the relu (a word below 0 still gets a gradient).
    cw = caption_words(logits(xv, cv, wv, bv), allowed, bags, has)
    cw_text = caption_words(logits(xl, cl, wl, bl), allowed, bags, has)
    total = total + CAPTION_WORDS * cw + CAPTION_WORDS_TEXT * cw_text
    grads = torch.autograd.grad(total, [wv, bv, wl, bl])

    out = {
        **entries(
            "config", scalar, tau=TAU, teacher_tau=TEACHER_TAU, distill=DISTILL,
            lambda_image=LAMBDA_IMAGE, lambda_text=LAMBDA_TEXT, grounding=GROUNDING,
            caption_words=CAPTION_WORDS, caption_words_text=CAPTION_WORDS_TEXT,
            caption_words_tau=CAPTION_WORDS_TAU,
        ),
        **entries("config", i64_scalar, k_image=K_IMAGE, k_text=K_TEXT),
        **entries("input", f32, xv=xv, xl=xl, cv=cv, cl=cl, wv=wv, bv=bv, wl=wl, bl=bl, allowed=allowed),
        **caption_inputs(ids, mask, idf),
        **entries("expect", f32, pv=pv, pl=pl),
        **entries(
            "expect", scalar, i2t=i2t, t2i=t2i, distill=kd, flops_image=fv, flops_text=fl,
            ground_image=gv, ground_text=gl, caption_words=cw, caption_words_text=cw_text,
            total=total,
        ),
        **head_grads(grads),
    }
    save_tensors(OUT, out)
    print(f"wrote {OUT}: total {float(total):.6f}")

    words = allowed.clone()
    words[TEMPLATE] = 0.0

    def text_variant(out_path, text_lexicons, config):
        """The step with the caption lexicons `text_lexicons(full_l)` on a fresh graph (the
        first one was freed by its gradient), saved with `config` to `out_path`."""
        full_v = full_lexicon(xv, cv, wv, bv, allowed)
        full_l = full_lexicon(xl, cl, wl, bl, allowed)
        pl = text_lexicons(full_l)
        total = step_total(
            cut(full_v, K_IMAGE), pl, full_v, full_l, logits(xv, cv, wv, bv),
            logits(xl, cl, wl, bl), xv, xl, bags, has, allowed,
        )
        grads = torch.autograd.grad(total, [wv, bv, wl, bl])
        save_tensors(
            out_path,
            {
                **config,
                "input.template": torch.tensor(TEMPLATE, dtype=torch.int64),
                "expect.pl": f32(pl),
                "expect.total": scalar(total),
                **head_grads(grads),
            },
        )
        print(f"wrote {out_path}: total {float(total):.6f}")
        return pl

    text_variant(
        OUT_EXPANSION,
        lambda full_l: expansion_control(full_l, ids, mask, words, EXPANSION),
        {"config.expansion": i64_scalar(EXPANSION)},
    )
    pl_f = text_variant(
        OUT_FLOOR,
        lambda full_l: own_floor(cut(full_l, K_TEXT), full_l, ids, mask, words, OWN_FLOOR),
        {"config.own_floor": scalar(OWN_FLOOR)},
    )
    full_l = full_lexicon(xl, cl, wl, bl, allowed).detach()
    lifted = int(((pl_f.detach() - cut(full_l, K_TEXT)).abs() > 0).sum())
    assert lifted > 0, "the fixture must lift at least one own word"
    print(f"{lifted} own words lifted")


if __name__ == "__main__":
    main()
