#!/usr/bin/env python3
"""PyTorch baseline of `lexlip train` phase 1: the same model and step, timed on the CPU or a GPU.

The model is the one `lexlip train --text-config tiny --image-config tiny` builds (random init):
  text   BERT masked LM, 2 layers × 128, 2 heads, FFN 512, vocabulary 30,522, MLM head tied to
         the word embeddings (the tiny SPLADE's shape);
  image  BEiT, 4 layers × 128, 2 heads, FFN 512, 64 px, patch 8, relative position bias per
         layer, layer scale 0.1, final layer norm, plus its own BERT-style MLM head;
  LexMLM two decoders of 2 BERT layers, the bottleneck replacing [CLS], heads tied to the word
         embeddings.
One step: SelfMLM + LexMLM i2t + LexMLM t2i + BaCo with FLOPS (LexLIP eq. 7-18), dropout 0.1
where the Rust towers have it, backward, gradient clipping to norm 1, AdamW (weight decay on
matrices), the linear warm-up/decay schedule. Batches are fixed and synthetic (random pixels and
token ids, captions of exactly --max-length tokens, 30 % / 50 % masking), so no data pipeline is
timed. After --warmup steps, --steps steps are timed; prints one JSON object with samples/s.

    .venv-torch/bin/python scripts/bench_train_torch.py --steps 20 --warmup 2

scripts/bench-train.sh runs it next to `lexlip train` on a corpus of the same shape.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 30522
CLS, SEP, MASK = 101, 102, 103  # BERT's ids
# init.rs text_preset / image_preset; --size picks one pair (the towers are filled in main()).
PRESETS = {
    "tiny": (dict(hidden=128, layers=2, heads=2, inter=512),
             dict(hidden=128, layers=4, heads=2, inter=512, size=64, patch=8)),
    "base": (dict(hidden=768, layers=12, heads=12, inter=3072),
             dict(hidden=768, layers=12, heads=12, inter=3072, size=224, patch=16)),
}
TEXT, IMAGE = (dict(d) for d in PRESETS["tiny"])
EPS = 1e-12
STD = 0.02


def attention(q, k, v, heads, bias):
    n, t, h = q.shape
    d = h // heads
    q, k, v = (x.view(n, t, heads, d).transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d) + bias
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, t, h)


class BertLayer(nn.Module):
    """Post-norm BERT layer."""

    def __init__(self, h, heads, inter, p):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(h, eps=EPS), nn.LayerNorm(h, eps=EPS)
        self.up, self.down = nn.Linear(h, inter), nn.Linear(inter, h)
        self.heads, self.drop = heads, nn.Dropout(p)

    def forward(self, x, bias):
        att = attention(self.q(x), self.k(x), self.v(x), self.heads, bias)
        x = self.norm1(x + self.drop(self.o(att)))
        return self.norm2(x + self.drop(self.down(F.gelu(self.up(x)))))


class MlmHead(nn.Module):
    """Transform (dense, gelu, layer norm) then the vocabulary projection (`weight` if tied)."""

    def __init__(self, h, vocab, tied=None):
        super().__init__()
        self.dense, self.norm = nn.Linear(h, h), nn.LayerNorm(h, eps=EPS)
        self.tied = tied
        self.decoder = None if tied is not None else nn.Parameter(torch.randn(vocab, h) * STD)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, x):
        w = self.tied.weight if self.tied is not None else self.decoder
        return F.linear(self.norm(F.gelu(self.dense(x))), w, self.bias)


class BertEmbeddings(nn.Module):
    def __init__(self, h, p, positions=512):
        super().__init__()
        self.word = nn.Embedding(VOCAB, h)
        self.position = nn.Embedding(positions, h)
        self.token_type = nn.Embedding(2, h)
        self.norm, self.drop = nn.LayerNorm(h, eps=EPS), nn.Dropout(p)

    def forward(self, ids):
        pos = self.position.weight[: ids.shape[1]]
        return self.drop(self.norm(self.word(ids) + pos + self.token_type.weight[0]))


def padding_bias(mask):
    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


class BertMlm(nn.Module):
    def __init__(self, p):
        super().__init__()
        h = TEXT["hidden"]
        self.embeddings = BertEmbeddings(h, p)
        self.layers = nn.ModuleList(
            BertLayer(h, TEXT["heads"], TEXT["inter"], p) for _ in range(TEXT["layers"])
        )
        self.head = MlmHead(h, VOCAB, tied=self.embeddings.word)

    def forward(self, ids, mask):
        x, bias = self.embeddings(ids), padding_bias(mask)
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x)


def relative_index(g):
    """BEiT's relative position index for a g×g grid plus the class token."""
    coords = torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (g - 1)
    idx = torch.zeros(g * g + 1, g * g + 1, dtype=torch.long)
    idx[1:, 1:] = rel[..., 0] * (2 * g - 1) + rel[..., 1]
    n = (2 * g - 1) ** 2
    idx[0, :], idx[:, 0], idx[0, 0] = n, n + 1, n + 2
    return idx


class BeitLayer(nn.Module):
    """Pre-norm BEiT layer: no key bias, relative position bias, layer scale."""

    def __init__(self, h, heads, inter, g, p):
        super().__init__()
        self.q, self.v, self.o = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.k = nn.Linear(h, h, bias=False)
        self.table = nn.Parameter(torch.zeros((2 * g - 1) ** 2 + 3, heads))
        self.register_buffer("index", relative_index(g), persistent=False)
        self.lambda_1 = nn.Parameter(torch.full((h,), 0.1))
        self.lambda_2 = nn.Parameter(torch.full((h,), 0.1))
        self.norm1, self.norm2 = nn.LayerNorm(h, eps=EPS), nn.LayerNorm(h, eps=EPS)
        self.up, self.down = nn.Linear(h, inter), nn.Linear(inter, h)
        self.heads, self.drop = heads, nn.Dropout(p)

    def forward(self, x):
        y = self.norm1(x)
        bias = self.table[self.index].permute(2, 0, 1)
        x = x + self.lambda_1 * self.drop(self.o(attention(self.q(y), self.k(y), self.v(y), self.heads, bias)))
        return x + self.lambda_2 * self.drop(self.down(F.gelu(self.up(self.norm2(x)))))


class BeitMlm(nn.Module):
    def __init__(self, p):
        super().__init__()
        h, g = IMAGE["hidden"], IMAGE["size"] // IMAGE["patch"]
        self.patch = nn.Conv2d(3, h, IMAGE["patch"], stride=IMAGE["patch"])
        self.cls = nn.Parameter(torch.randn(1, 1, h) * STD)
        self.layers = nn.ModuleList(
            BeitLayer(h, IMAGE["heads"], IMAGE["inter"], g, p) for _ in range(IMAGE["layers"])
        )
        self.norm, self.drop = nn.LayerNorm(h, eps=EPS), nn.Dropout(p)
        self.head = MlmHead(h, VOCAB)

    def forward(self, pixels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = self.drop(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


class Decoder(nn.Module):
    """LexMLM's weakened decoder; logits at the masked rows only (what the loss reads)."""

    def __init__(self, word, p, layers=2):
        super().__init__()
        h = TEXT["hidden"]
        self.layers = nn.ModuleList(BertLayer(h, TEXT["heads"], TEXT["inter"], p) for _ in range(layers))
        self.head = MlmHead(h, VOCAB, tied=word)

    def forward(self, embedded, bottleneck, mask, rows):
        x, bias = torch.cat([bottleneck[:, None], embedded[:, 1:]], dim=1), padding_bias(mask)
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(x.reshape(-1, x.shape[-1])[rows])


class LexLip(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.text, self.image = BertMlm(p), BeitMlm(p)
        self.decoder_image = Decoder(self.text.embeddings.word, p)
        self.decoder_text = Decoder(self.text.embeddings.word, p)

    def phase1(self, b, tau, lam):
        image_logits = self.image(b["pixels"])
        pv = torch.log1p(image_logits.relu().amax(1))
        av = image_logits.amax(1).softmax(-1)
        masked_logits = self.text(b["enc_ids"], b["mask"])
        self_mlm = F.cross_entropy(masked_logits.flatten(0, 1)[b["enc_rows"]], b["enc_targets"])
        pad = b["mask"][:, :, None] == 0
        al = masked_logits.masked_fill(pad, float("-inf")).amax(1).softmax(-1)
        text_logits = self.text(b["ids"], b["mask"])
        pl = torch.log1p(text_logits.relu().masked_fill(pad, 0).amax(1))
        word = self.text.embeddings.word.weight.detach()
        emb = self.text.embeddings(b["dec_ids"])
        args = (b["mask"], b["dec_rows"])
        i2t = F.cross_entropy(self.decoder_image(emb, av @ word, *args), b["dec_targets"])
        t2i = F.cross_entropy(self.decoder_text(emb, al @ word, *args), b["dec_targets"])
        sim = pv @ pl.T / tau
        diag = torch.arange(sim.shape[0], device=sim.device)
        flops = lambda p: (p.mean(0) ** 2).sum()  # noqa: E731
        baco = (F.cross_entropy(sim, diag) + lam * flops(pv) + F.cross_entropy(sim.T, diag) + lam * flops(pl)) / 2
        return self_mlm + i2t + t2i + baco


def synthetic_batch(gen, batch, length):
    """Captions of exactly `length` tokens ([CLS] … [SEP]) and BERT masking of the words."""

    def mask_tokens(ids, rate):
        out, rows, targets = ids.clone(), [], []
        words = length - 2
        k = max(1, round(rate * words))
        for i in range(batch):
            pos = (torch.randperm(words, generator=gen)[:k] + 1).sort().values
            rows += (i * length + pos).tolist()
            targets += ids[i, pos].tolist()
            out[i, pos] = MASK
        return out, torch.tensor(rows), torch.tensor(targets)

    ids = torch.randint(1000, VOCAB, (batch, length), generator=gen)
    ids[:, 0], ids[:, -1] = CLS, SEP
    enc_ids, enc_rows, enc_targets = mask_tokens(ids, 0.3)
    dec_ids, dec_rows, dec_targets = mask_tokens(ids, 0.5)
    size = IMAGE["size"]
    return dict(
        pixels=torch.randn(batch, 3, size, size, generator=gen),
        ids=ids, mask=torch.ones(batch, length, dtype=torch.long),
        enc_ids=enc_ids, enc_rows=enc_rows, enc_targets=enc_targets,
        dec_ids=dec_ids, dec_rows=dec_rows, dec_targets=dec_targets,
    )


def init_weights(model):
    """BERT's initialisation (normal 0.02, zero biases, unit norms; BEiT's tables stay zero)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.Embedding)):
            nn.init.trunc_normal_(m.weight, std=STD, a=-2 * STD, b=2 * STD)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=4, help="distinct synthetic batches, cycled")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--size", choices=sorted(PRESETS), default="tiny",
                    help="tower sizes (lexlip train --text-config/--image-config)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (f32, no TF32: as lexlip --gpu)")
    args = ap.parse_args()
    device = torch.device(args.device)
    TEXT.update(PRESETS[args.size][0])
    IMAGE.update(PRESETS[args.size][1])
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    batches = [synthetic_batch(gen, args.batch_size, args.max_length) for _ in range(args.batches)]
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]

    model = LexLip(p=0.1)
    init_weights(model)
    model.to(device)
    model.train()
    no_decay = ("bias", "norm", "position", "table", "lambda_", "cls")
    params = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in params if p.dim() >= 2 and not any(k in n for k in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in params if p.dim() < 2 or any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    total = args.warmup + args.steps
    warm = max(1, int(0.1 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / max(1, total - warm))
    )
    all_params = [p for _, p in params]

    def step(i):
        loss = model.phase1(batches[i % len(batches)], tau=0.05, lam=0.002)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()
        sched.step()
        return loss.detach().item()

    first = [step(i) for i in range(args.warmup)]
    start = time.perf_counter()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    seconds = time.perf_counter() - start
    print(json.dumps({
        "framework": "pytorch",
        "size": args.size,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "parameters": sum(p.numel() for p in model.parameters()),
        "warmup_steps": args.warmup,
        "steps": args.steps,
        "seconds": round(seconds, 3),
        "samples_per_s": args.steps * args.batch_size / seconds,
        "loss_first": (first or losses)[0],
        "loss_last": losses[-1],
    }))


if __name__ == "__main__":
    main()
