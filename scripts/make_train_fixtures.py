#!/usr/bin/env python3
"""PyTorch references of the LexLIP training objectives for `train/tests/losses_vs_torch.rs`.

Each loss is written here from the paper (LexLIP, ICCV 2023, sec. 3.2 eq. 7-18 and sec. 3.3
eq. 19-23), not from the Rust code, and evaluated in float64 on fixed small random tensors
(seeded). The inputs (float32), the expected losses (float64) and the gradients with respect to
the inputs (float32) go to one small safetensors file the Rust test reads; CI never runs this.

Regenerate (torch is only needed here; the CPU build is enough):

    python3 -m venv .venv-torch        # git-ignored (/.venv*/)
    .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python scripts/make_train_fixtures.py

Writes train/tests/fixtures/losses_vs_torch.safetensors. Names:
  config.*      tau, lambda (f64), decoder heads (i64)
  input.*       logits, attention mask, word embeddings, decoder inputs, masked positions
  decoder_image.* / decoder_text.*  the two LexMLM decoders, in the names the Rust `Decoder` uses
  expect.*      losses (f64 scalars), representations, gradients (f32)
  moco.N.*      step N of a MoCo run: inputs, expected losses and gradients; moco.queue_* the
                queues after the last step, oldest row first
"""

import collections
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from fixture_io import bert_layer, gelu, linear, norm

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "train" / "tests" / "fixtures" / "losses_vs_torch.safetensors"

# Shapes: batch, text tokens, image tokens (CLS + patches), vocabulary, hidden, decoder sizes.
B, T, M, V, H = 4, 5, 4, 12, 8
HEADS, INTER, DEC_LAYERS = 2, 16, 1
# The paper's τ; λ larger than its 0.002 so the FLOPS term moves the loss well above tolerance.
TAU, LAMBDA = 0.05, 0.1
# Phase 2: queue capacity (a multiple of B) and steps (the queue fills, then wraps around).
QUEUE, MOCO_STEPS = 8, 4
LENGTHS = [5, 3, 4, 2]  # real tokens per caption; the rest is padding

gen = torch.Generator().manual_seed(20230611)


def randn(*shape, scale=1.0, shift=0.0):
    """float32 inputs (what the fixture stores), promoted to float64 for the reference."""
    return (torch.randn(*shape, generator=gen) * scale + shift).float().double()


# ---- the objectives, from the paper ------------------------------------------------------------


def splade(logits, mask=None):
    """Eq. 3/6: p = log(1 + MaxPool_t(max(S, 0))); padding tokens are not part of the text."""
    act = torch.clamp(logits, min=0)
    if mask is not None:
        act = act * mask[:, :, None]
    return torch.log1p(act.amax(dim=1))


def importance(logits, mask=None):
    """Eq. 8/9: a = softmax(MaxPool_t(S)) over the vocabulary (raw logits, padding excluded)."""
    if mask is not None:
        logits = logits.masked_fill(mask[:, :, None] == 0, float("-inf"))
    return torch.softmax(logits.amax(dim=1), dim=-1)


def masked_lm(logits, positions, targets):
    """Eq. 7/13/14: -log P(w_j = y_j) at the masked positions (b, t), averaged over them."""
    terms = [
        -torch.log_softmax(logits[b, t], dim=-1)[y] for (b, t), y in zip(positions, targets)
    ]
    return torch.stack(terms).mean()


def decode(dec, bottleneck, embedded, mask, word):
    """Eq. 11/12: the bottleneck replaces [CLS] of the heavily masked text, shallow BERT layers,
    then an MLM head whose projection is the text tower's word embeddings."""
    x = torch.cat([bottleneck[:, None, :], embedded[:, 1:, :]], dim=1)
    for i in range(DEC_LAYERS):
        x = bert_layer(dec, f"layer.{i}.", x, HEADS, key_mask=mask)
    head = "cls.predictions."
    y = norm(gelu(linear(x, dec, head + "transform.dense")), dec, head + "transform.LayerNorm")
    return y @ word.T + dec[head + "bias"]


def lex_mlm(dec, distribution, word, embedded, mask, positions, targets):
    """Eq. 10-14: CBoW bottleneck b = a · sg(W_te), decoded; MLM loss at the decoder's masks."""
    bottleneck = distribution @ word.detach()
    return masked_lm(decode(dec, bottleneck, embedded, mask, word), positions, targets)


def flops(p):
    """SPLADE's FLOPS: Σ_j (mean_i p_ij)²."""
    return (p.mean(dim=0) ** 2).sum()


def contrast(scores):
    """-log of the softmax of column 0 (the positive), averaged over rows."""
    return (torch.logsumexp(scores, dim=1) - scores[:, 0]).mean()


def baco(pv, pl):
    """Eq. 15-17: pair i is the positive, the rest of the batch the negatives."""
    sim = pv @ pl.T / TAU
    n = sim.shape[0]
    # Row i with its positive first: roll each row so column i comes to the front.
    i2t = contrast(torch.stack([sim[i].roll(-i) for i in range(n)]))
    t2i = contrast(torch.stack([sim[:, i].roll(-i) for i in range(n)]))
    fv, fl = flops(pv), flops(pl)
    loss = ((i2t + LAMBDA * fv) + (t2i + LAMBDA * fl)) / 2
    return dict(i2t=i2t, t2i=t2i, flops_image=fv, flops_text=fl, loss=loss)


def moco(pv, pl, pv_m, pl_m, queue_image, queue_text):
    """Eq. 21-23: against the momentum key of the pair and the queued keys (no gradient)."""

    def side(q, key, queue):
        positive = (q * key.detach()).sum(-1, keepdim=True)
        negatives = q @ torch.stack(list(queue)).detach().T if queue else q[:, :0]
        return contrast(torch.cat([positive, negatives], dim=1) / TAU)

    i2t = side(pv, pl_m, queue_text)
    t2i = side(pl, pv_m, queue_image)
    fv, fl = flops(pv), flops(pl)
    loss = ((i2t + LAMBDA * fv) + (t2i + LAMBDA * fl)) / 2
    return dict(i2t=i2t, t2i=t2i, flops_image=fv, flops_text=fl, loss=loss)


# ---- fixed inputs ---------------------------------------------------------------------------------


def decoder_weights():
    w = {}
    for i in range(DEC_LAYERS):
        p = f"layer.{i}."
        for name in ["attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"]:
            w[p + name + ".weight"] = randn(H, H, scale=0.3)
            w[p + name + ".bias"] = randn(H, scale=0.1)
        w[p + "intermediate.dense.weight"] = randn(INTER, H, scale=0.3)
        w[p + "intermediate.dense.bias"] = randn(INTER, scale=0.1)
        w[p + "output.dense.weight"] = randn(H, INTER, scale=0.3)
        w[p + "output.dense.bias"] = randn(H, scale=0.1)
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"]:
            w[p + norm + ".weight"] = randn(H, scale=0.1, shift=1.0)
            w[p + norm + ".bias"] = randn(H, scale=0.1)
    c = "cls.predictions."
    w[c + "transform.dense.weight"] = randn(H, H, scale=0.3)
    w[c + "transform.dense.bias"] = randn(H, scale=0.1)
    w[c + "transform.LayerNorm.weight"] = randn(H, scale=0.1, shift=1.0)
    w[c + "transform.LayerNorm.bias"] = randn(H, scale=0.1)
    w[c + "bias"] = randn(V, scale=0.1)
    return w


def pick(rate):
    """Masked positions (b, t) among the real tokens after [CLS], at least one per caption, and
    their targets."""
    positions = []
    for b, n in enumerate(LENGTHS):
        candidates = list(range(1, n))
        k = max(1, round(rate * len(candidates)))
        order = torch.randperm(len(candidates), generator=gen)[:k].sort().values
        positions += [(b, candidates[j]) for j in order.tolist()]
    targets = torch.randint(0, V, (len(positions),), generator=gen).tolist()
    return positions, targets


def grads(loss, *tensors):
    return torch.autograd.grad(loss, tensors, allow_unused=True)


def main():
    f32, f64 = torch.float32, torch.float64
    out = {
        "config.tau": torch.tensor(TAU, dtype=f64),
        "config.lambda": torch.tensor(LAMBDA, dtype=f64),
        "config.heads": torch.tensor(HEADS, dtype=torch.int64),
    }

    def put(name, t, dtype=f32):
        out[name] = t.detach().to(dtype).contiguous()

    mask = torch.zeros(B, T, dtype=f64)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    # Sparse-ish logits (most below zero, as in a trained SPLADE) so τ = 0.05 gives soft softmaxes.
    image_logits = randn(B, M, V, scale=0.5, shift=-0.6).requires_grad_()
    masked_logits = randn(B, T, V, scale=0.5, shift=-0.6).requires_grad_()
    text_logits = randn(B, T, V, scale=0.5, shift=-0.6).requires_grad_()
    word = randn(V, H, scale=0.5).requires_grad_()
    embedded = randn(B, T, H).requires_grad_()
    enc_pos, enc_targets = pick(0.3)
    dec_pos, dec_targets = pick(0.5)
    decoders = {"decoder_image": decoder_weights(), "decoder_text": decoder_weights()}

    put("input.mask", mask, torch.int64)
    put("input.image_logits", image_logits)
    put("input.masked_logits", masked_logits)
    put("input.text_logits", text_logits)
    put("input.word_embeddings", word)
    put("input.decoder_embedded", embedded)
    put("input.enc_rows", torch.tensor([b * T + t for b, t in enc_pos]), torch.int64)
    put("input.enc_targets", torch.tensor(enc_targets), torch.int64)
    put("input.dec_rows", torch.tensor([b * T + t for b, t in dec_pos]), torch.int64)
    put("input.dec_targets", torch.tensor(dec_targets), torch.int64)
    for group, w in decoders.items():
        for k, v in w.items():
            put(f"{group}.{k}", v)

    # SelfMLM (eq. 7) on the encoder's logits of the masked text.
    self_mlm = masked_lm(masked_logits, enc_pos, enc_targets)
    put("expect.self_mlm", self_mlm, f64)
    put("expect.self_mlm.grad_masked_logits", grads(self_mlm, masked_logits)[0])

    # LexMLM i2t (image logits → a_v) and t2i (masked-text logits → a_l), eq. 8-14.
    a_v = importance(image_logits)
    a_l = importance(masked_logits, mask)
    put("expect.a_v", a_v)
    put("expect.a_l", a_l)
    for name, a, source in [("i2t", a_v, image_logits), ("t2i", a_l, masked_logits)]:
        dec = decoders["decoder_image" if name == "i2t" else "decoder_text"]
        loss = lex_mlm(dec, a, word, embedded, mask, dec_pos, dec_targets)
        g_src, g_word, g_emb = grads(loss, source, word, embedded)
        put(f"expect.lex_mlm_{name}", loss, f64)
        put(f"expect.lex_mlm_{name}.grad_logits", g_src)
        # The word embeddings get gradient through the tied projection only (sg in eq. 10).
        put(f"expect.lex_mlm_{name}.grad_word", g_word)
        put(f"expect.lex_mlm_{name}.grad_embedded", g_emb)

    # BaCo + FLOPS (eq. 15-17) on the SPLADE representations (eq. 3/6).
    pv = splade(image_logits)
    pl = splade(text_logits, mask)
    put("expect.pv", pv)
    put("expect.pl", pl)
    parts = baco(pv, pl)
    for k, v in parts.items():
        put(f"expect.baco.{k}", v, f64)
    g = grads(parts["loss"], pv, pl, image_logits, text_logits)
    for k, v in zip(["pv", "pl", "image_logits", "text_logits"], g):
        put(f"expect.baco.grad_{k}", v)

    # MoCo (eq. 21-23) over a few steps: the momentum keys of each step are queued after its
    # loss (first in, first out), so the first step has no negatives and later ones wrap around.
    queue_image = collections.deque(maxlen=QUEUE)
    queue_text = collections.deque(maxlen=QUEUE)
    for s in range(MOCO_STEPS):
        reps = {}
        for k in ["pv", "pl"]:
            online = torch.clamp(randn(B, V, scale=0.3, shift=-0.1), min=0).requires_grad_()
            # Momentum keys: close to the online representations, as EMA encoders are.
            momentum = torch.clamp(online.detach() + randn(B, V, scale=0.03), min=0)
            reps[k], reps[k + "_m"] = online, momentum
        for k, v in reps.items():
            put(f"moco.{s}.{k}", v)
        parts = moco(reps["pv"], reps["pl"], reps["pv_m"], reps["pl_m"], queue_image, queue_text)
        for k, v in parts.items():
            put(f"moco.{s}.{k}", v, f64)
        gv, gl = grads(parts["loss"], reps["pv"], reps["pl"])
        put(f"moco.{s}.grad_pv", gv)
        put(f"moco.{s}.grad_pl", gl)
        queue_image.extend(reps["pv_m"].unbind(0))
        queue_text.extend(reps["pl_m"].unbind(0))
    put("moco.queue_image", torch.stack(list(queue_image)))
    put("moco.queue_text", torch.stack(list(queue_text)))
    out["moco.capacity"] = torch.tensor(QUEUE, dtype=torch.int64)

    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(OUT))
    summary = {k: round(float(v), 6) for k, v in out.items() if v.dim() == 0}
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes, {len(out)} tensors)")
    for k, v in summary.items():
        print(f"  {k} = {v}")


if __name__ == "__main__":
    main()
