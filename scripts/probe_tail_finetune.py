#!/usr/bin/env python3
"""Does training MobileNetV2's last blocks narrow the art-style gap? A CPU probe of fine-tuning.

`scripts/probe_style_gap.py` found that a frozen ImageNet tower leaves the never-seen style
(Twemoji) 18 points under the trained one (Noto) even with augmented views, and that closing the
gap needs a tower trained on these pictures. A whole MobileNetV2 does not train on a 2-core CPU
in an hour; its last blocks do, from activations cached once. This probe trains the blocks after
`--split` (by default the last inverted residual block and the 1,280-channel convolution; batch
norms keep their ImageNet statistics) together with the probe's projection, on the training
pictures and the style probe's augmented Noto views, and compares it with the same projection
over the frozen tower at the same seeds. Same loss, test split and figures as the other probes.

Needs what probe_style_gap.py needs, and its `--work` folder (the augmented views, the teacher's
caches). About 25 minutes on 2 cores for one seed (the activations once, then 2-3 minutes an epoch).

  python3 scripts/probe_tail_finetune.py --corpus target/data/emoji-corpus-ht \
      --teacher models/emoji-lex/dense --lexlip target/release/lexlip --work target/probe-style
"""
import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_image_backbone as probe  # noqa: E402
import probe_style_gap as style  # noqa: E402


def activations(model, split, root, images, out):
    """`model.features[:split]` of every picture, f16 (cached in `out`)."""
    if out.is_file():
        return torch.from_numpy(np.load(out))
    head, chunks = model.features[:split], []
    with torch.no_grad():
        for i in range(0, len(images), 64):
            chunks.append(head(torch.stack([probe.pixels(root, p) for p in images[i:i + 64]])).half())
            print(f"  {min(i + 64, len(images))}/{len(images)} images", file=sys.stderr, end="\r")
    a = torch.cat(chunks)
    np.save(out, a.numpy())
    return a


def train(tail, acts, teacher, texts, pair, test_acts, test_teacher, epochs, seed, tail_lr, tau=0.05):
    """The projection (the probe's MLP) over [the tail's pooled features, the teacher's image
    embedding], the tail trained at `tail_lr` (0: frozen); symmetric in-batch InfoNCE."""
    torch.manual_seed(seed)
    tail = copy.deepcopy(tail).eval()  # batch norms keep their statistics
    for p in tail.parameters():
        p.requires_grad_(tail_lr > 0)

    def pooled(a):
        return torch.cat([tail(a[i:i + 256].float()).mean((2, 3)) for i in range(0, len(a), 256)])

    with torch.no_grad():
        start = torch.cat([pooled(acts), teacher], 1)
    mu, sd = start.mean(0), start.std(0) + 1e-6
    net = probe.mlp(start.shape[1], texts.shape[1])
    groups = [{"params": net.parameters(), "lr": 1e-3}]
    if tail_lr > 0:
        groups.append({"params": tail.parameters(), "lr": tail_lr})
    opt = torch.optim.AdamW(groups, weight_decay=0.01)
    t = F.normalize(texts, dim=1)
    for epoch in range(epochs):
        net.train()
        for b, batch in enumerate(torch.randperm(len(pair)).split(256)):
            images = pair[batch]
            unique, where = images.unique(return_inverse=True)
            if tail_lr > 0:
                f = tail(acts[unique].float()).mean((2, 3))
            else:
                f = start[unique, :-teacher.shape[1]]
            x = (torch.cat([f, teacher[unique]], 1) - mu) / sd
            loss = probe.masked_info_nce(t[batch], F.normalize(net(x), dim=1)[where], images, tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if b % 50 == 0:
                print(f"  epoch {epoch} batch {b} loss {loss.item():.3f}", file=sys.stderr, end="\r")
    net.eval()
    with torch.no_grad():
        return net((torch.cat([pooled(test_acts), test_teacher], 1) - mu) / sd)


def main():
    ap = probe.arguments(__doc__.split("\n")[0])
    ap.add_argument("--views", type=int, default=3, help="the style probe's augmented views per Noto picture")
    ap.add_argument("--split", type=int, default=17, help="train MobileNetV2's features[split:]")
    ap.add_argument("--tail-lr", type=float, default=1e-4)
    ap.set_defaults(epochs=4, seeds="0")
    args = ap.parse_args()
    torch.set_num_threads(2)

    mobilenet = probe.load_backbone(args.work)
    tail = mobilenet.features[args.split:]
    _, train_images, train_pair = probe.tsv(args.corpus / f"{args.train}.tsv")
    _, test_images, test_pair = probe.tsv(args.corpus / f"{args.test}.tsv")
    styles = [p.split("/")[1] for p in test_images]
    aug_root, aug_tsv = style.augmented_corpus(args, args.views)
    _, aug_images, aug_pair = probe.tsv(aug_tsv)
    name = f"mobilenetv2-{args.split}"
    acts = torch.cat([
        activations(mobilenet, args.split, args.corpus, train_images, args.work / f"{name}-{args.train}.npy"),
        activations(mobilenet, args.split, aug_root, aug_images, args.work / f"{name}-augmented-{args.views}.npy")])
    test_acts = activations(mobilenet, args.split, args.corpus, test_images, args.work / f"{name}-{args.test}.npy")
    t_img, t_txt = probe.teacher_cache(args, args.train, args.work)
    a_img, a_txt = probe.teacher_cache(args, f"augmented-{args.views}", args.work, aug_tsv)
    e_img, e_txt = probe.teacher_cache(args, args.test, args.work)
    teacher, texts = torch.cat([t_img, a_img]), torch.cat([t_txt, a_txt])
    pair = torch.cat([train_pair, aug_pair + len(train_images)])

    results = {}
    for arm, lr in [("frozen tower + views", 0.0), (f"features[{args.split}:] trained at {args.tail_lr} + views", args.tail_lr)]:
        runs = [probe.recall(train(tail, acts, teacher, texts, pair, test_acts, e_img, args.epochs, int(s), lr),
                             e_txt, test_pair, styles) for s in args.seeds.split(",")]
        r = {k: [float(np.mean([run[k][d] for run in runs])) for d in (0, 1)] for k in runs[0]}
        r["gap"] = r["google"][0] - r["twitter"][0]
        results[arm] = r
        row = "  ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in r.items() if k != "gap")
        print(f"{arm}: {row}  Noto − Twemoji T2I {r['gap']:.1f}", flush=True)
    (args.work / f"probe-tail-{args.split}.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
