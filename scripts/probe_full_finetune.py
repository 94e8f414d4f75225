#!/usr/bin/env python3
"""Does training all of MobileNetV2 narrow the art-style gap? A GPU probe of a full fine-tune.

`scripts/probe_tail_finetune.py` trained the tower's last blocks on the CPU and found that they
lift the styles they train on (Noto, clip art) and leave the never-seen one (Twemoji) where it
was. This probe trains the whole tower (batch norms keep their ImageNet statistics) with the
adapter's projection, loss and inputs, on every training picture drawn afresh each time it is
used: a random flip, rotation, scale and shift, colour jitter, and half the time a flat redraw
(blur, then 4-8 levels per channel), all on the GPU. Arms, one seed each, same batches:
  - the tower frozen, the projection trained on the augmented pictures (the control);
  - the whole tower trained beside the projection, with the teacher's embedding as an input;
  - the same without the teacher's embedding (the tower alone must carry the picture);
  - the whole tower trained at three times the rate;
  - `no-flip`: the third arm with no mirror images among the views (a mirrored picture is
    another emoji for some: left and right arrows, "facing right", one and eleven o'clock);
  - `line-art`, `line-art-all`: that, with half (all) of the flat redraws drawn as outlined
    line art ([`line_art`]), a style the corpus lacks (OpenMoji's).
Figures: R@10 text→image / image→text on `test` (all, and per style), on the held-out style
and on a style no arm trains on (`prepare --unseen MANIFEST`, e.g. OpenMoji), as the other
probes count them; the gap is Noto − Twemoji T2I on the unseen concepts.

Two steps, because the GPU machine has PyTorch but no lexlip and no corpus:
  prepare (here, CPU): the pictures at 64 px, the teacher's embeddings (lexlip heads caches) and
      the MobileNetV2 weights (`scripts/fetch-image-backbone.sh`) in one folder, `--bundle`;
  train (on the GPU): the arms; writes `full-finetune.json` and each trained tower as
      `<arm>.safetensors`, tensor for tensor in the layout lexlip's `--image-backbone` reads.

  python3 scripts/probe_full_finetune.py prepare --corpus target/data/emoji-corpus-ht \
      --teacher models/emoji-dense --lexlip target/release/lexlip --work target/probe-style \
      --backbone target/test-models/mobilenet-v2 --bundle target/ft-bundle \
      [--unseen target/data/openmoji/manifest.jsonl]
  python3 scripts/probe_full_finetune.py train --bundle target/ft-bundle --out OUT \
      [--arms tuned-alone,no-flip,line-art,line-art-all]
"""
import argparse
import copy
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_image_backbone as probe  # noqa: E402

SPLITS = {"train": "train-holdout-twitter", "test": "test", "held": "test-holdout-twitter"}
SCALE = 400.0  # embeddings are unit-length with no coordinate above 0.3: int8 at 1/400 steps


def picture_array(root, images, side=64):
    """Every picture as uint8 RGB at `side` pixels (the teacher's input size), over white."""
    from PIL import Image
    out = np.empty((len(images), side, side, 3), dtype=np.uint8)
    for i, p in enumerate(images):
        im = probe.on_white(root, p)
        if im.size != (side, side):
            im = im.resize((side, side), Image.BICUBIC)
        out[i] = np.asarray(im)
    return out


def quantised(x):
    """int8 at 1/SCALE steps (the bundle must travel in 64 MiB; cosines move by < 0.002)."""
    return (x.numpy() * SCALE).round().clip(-127, 127).astype(np.int8)


def prepare(args):
    args.bundle.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for key in args.splits.split(","):
        split = SPLITS[key]
        _, images, pair = probe.tsv(args.corpus / f"{split}.tsv")
        img, txt = probe.teacher_cache(args, split, args.work)
        arrays[f"{key}_px"] = picture_array(args.corpus, images)
        arrays[f"{key}_pair"] = pair.numpy().astype(np.int32)
        arrays[f"{key}_img"] = quantised(img)
        arrays[f"{key}_txt"] = quantised(txt)
        arrays[f"{key}_style"] = np.array([p.split("/")[1] for p in images])
        print(f"{split}: {len(images)} pictures, {len(pair)} captions", file=sys.stderr)
    if args.unseen:
        rows = [json.loads(line) for line in open(args.unseen) if line.strip()]
        root = args.unseen.resolve().parent
        tsv_path = args.work / "unseen.tsv"
        with open(tsv_path, "w") as f:
            f.write("title\tfilepath\timage_id\n")
            for r in rows:
                f.write(f"{r['text']}\t{root / r['image']}\t{r['id']}\n")
        _, images, pair = probe.tsv(tsv_path)
        img, txt = probe.teacher_cache(args, "unseen", args.work, tsv_path)
        arrays["unseen_px"] = picture_array(Path("/"), images)
        arrays["unseen_pair"] = pair.numpy().astype(np.int32)
        arrays["unseen_img"], arrays["unseen_txt"] = quantised(img), quantised(txt)
        arrays["unseen_style"] = np.array(["unseen"] * len(images))
        print(f"{args.unseen}: {len(images)} pictures, {len(pair)} captions", file=sys.stderr)
    np.savez_compressed(args.bundle / "data.npz", **arrays)
    shutil.copy(args.backbone / "model.safetensors", args.bundle / "mobilenetv2.safetensors")


def uniform(n, lo, hi, g):
    return lo + (hi - lo) * torch.rand(n, generator=g, device=g.device)


def blur(x, sigma):
    """A Gaussian blur of each picture with its own `sigma` (a 5-tap separable kernel)."""
    n, c, h, w = x.shape
    taps = torch.arange(-2, 3, device=x.device, dtype=x.dtype)
    k = torch.exp(-taps[None] ** 2 / (2 * sigma[:, None] ** 2))
    k = (k / k.sum(1, keepdim=True)).repeat_interleave(c, 0)  # (n·c, 5)
    y = 1 - x.reshape(1, n * c, h, w)  # ink, so the zero padding is white
    y = F.conv2d(y, k[:, None, None, :], padding=(0, 2), groups=n * c)
    y = F.conv2d(y, k[:, None, :, None], padding=(2, 0), groups=n * c)
    return 1 - y.reshape(n, c, h, w)


def line_art(x, g):
    """Flat pictures (N, 3, H, W, white ground) redrawn as outlined line art, as sets such as
    OpenMoji draw: the fills washed toward white by 0-40 %, then a dark line 1-2 pixels wide (at
    64 px; 4-7 once resized to 224) around the figure and where its colour changes strongly
    (by 0.25-0.45 of the RGB cube's diagonal: borders between regions, not shading)."""
    n = len(x)
    figure = ((1 - x).amax(1, keepdim=True) > 0.08).to(x.dtype)
    outline = figure + F.max_pool2d(-figure, 3, 1, 1)  # the figure's own edge pixels
    pad = F.pad(x, (1, 1, 1, 1), mode="replicate")  # steps across two pixels: soft edges count
    dx = (pad[:, :, 1:-1, 2:] - pad[:, :, 1:-1, :-2]).pow(2).sum(1, keepdim=True).sqrt()
    dy = (pad[:, :, 2:, 1:-1] - pad[:, :, :-2, 1:-1]).pow(2).sum(1, keepdim=True).sqrt()
    step = torch.maximum(dx, dy) / math.sqrt(3)
    border = (step > uniform(n, 0.25, 0.45, g)[:, None, None, None]).to(x.dtype) * figure
    edge = torch.maximum(outline, border)
    wash = uniform(n, 0.0, 0.4, g)[:, None, None, None]
    ink = uniform(n, 0.0, 0.2, g)[:, None, None, None]
    return edge * ink + (1 - edge) * (x + wash * (1 - x))


def augment(x, g, rotate=20.0, flip=0.5, lines=0.0):
    """One random view of each picture (N, 3, 64, 64, in [0, 1], white ground), on the GPU:
    a mirror image for a share `flip`, rotation, scale 0.75-1.1, shift up to 4 px, saturation,
    brightness and contrast jitter, and for half of them a flat redraw (blur 0.3-1 px, then 4-8
    levels per channel), of which a share `lines` is then drawn as line art ([`line_art`])."""
    n = len(x)
    angle = uniform(n, -rotate, rotate, g) * math.pi / 180
    scale = uniform(n, 0.75, 1.1, g)
    flip = torch.where(torch.rand(n, generator=g, device=x.device) < flip, -1.0, 1.0)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos * flip, -sin, uniform(n, -0.125, 0.125, g)], 1),
                         torch.stack([sin * flip, cos, uniform(n, -0.125, 0.125, g)], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    ink = F.grid_sample(1 - x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    mask = (ink.amax(1, keepdim=True) * 8).clamp(0, 1)  # where something is drawn
    x = 1 - ink
    grey = (0.299 * x[:, :1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:])
    x = grey + uniform(n, 0.6, 1.5, g)[:, None, None, None] * (x - grey)
    x = x * uniform(n, 0.8, 1.1, g)[:, None, None, None]
    m = (grey * mask).sum((2, 3), keepdim=True) / mask.sum((2, 3), keepdim=True).clamp_min(1)
    x = (m + uniform(n, 0.8, 1.3, g)[:, None, None, None] * (x - m)).clamp(0, 1)
    x = mask * x + (1 - mask)
    flat = torch.rand(n, generator=g, device=x.device) < 0.5
    if flat.any():
        y = blur(x[flat], uniform(int(flat.sum()), 0.3, 1.0, g))
        levels = torch.randint(4, 9, (int(flat.sum()),), generator=g, device=x.device).float()
        lv = (levels - 1)[:, None, None, None]
        y = torch.round(y * lv) / lv
        if lines > 0:
            drawn = torch.rand(len(y), generator=g, device=x.device) < lines
            if drawn.any():
                y[drawn] = line_art(y[drawn], g)
        x = x.clone()
        x[flat] = y
    return x


class Tower(torch.nn.Module):
    """MobileNetV2 as the fused model runs it: the 64-px picture resized bilinearly to 224,
    normalised as ImageNet's, the 1,280 features averaged over the grid."""

    def __init__(self, weights):
        super().__init__()
        from safetensors.torch import load_file
        self.net = probe.mobilenet_v2()
        missing, unexpected = self.net.load_state_dict(load_file(weights), strict=False)
        assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
        self.register_buffer("mean", torch.tensor(probe.MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(probe.STD).view(1, 3, 1, 1))

    def forward(self, x):
        x = F.interpolate(x, size=(224, 224), mode="bilinear", align_corners=False)
        x = ((x - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        return self.net.features(x).float().mean((2, 3))


# The arms: the tower's learning rate (× --tower-lr; 0: frozen), whether the teacher's
# embedding is an input beside the tower's features, the share of views mirrored, and the share
# of flat redraws drawn as line art. Mirror images are other emoji for some pictures (left and
# right arrows, "facing right", one and eleven o'clock), so the last two arms draw none.
ARMS = {
    "frozen": (0.0, True, 0.5, 0.0),
    "tuned": (1.0, True, 0.5, 0.0),
    "tuned-alone": (1.0, False, 0.5, 0.0),
    "tuned-fast": (3.0, True, 0.5, 0.0),
    "no-flip": (1.0, False, 0.0, 0.0),
    "line-art": (1.0, False, 0.0, 0.5),
    "line-art-all": (1.0, False, 0.0, 1.0),
}


def run_arm(name, base, data, dev, args, log):
    rate, teacher_input, flip, lines = ARMS[name]
    tower_lr = rate * args.tower_lr
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed)
    torch.manual_seed(args.seed)
    tower = copy.deepcopy(base).eval()  # batch norms keep their statistics
    for p in tower.parameters():
        p.requires_grad_(tower_lr > 0)
    px, pair, t_img, t_txt = data["train_px"], data["train_pair"], data["train_img"], data["train_txt"]

    def features(pictures, teacher):
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
            f = torch.cat([tower(pictures[i:i + 512].float() / 255) for i in range(0, len(pictures), 512)])
        return torch.cat([f, teacher], 1) if teacher_input else f

    start = features(px, t_img)
    mu, sd = start.mean(0), start.std(0) + 1e-6
    net = probe.mlp(start.shape[1], t_txt.shape[1]).to(dev)
    groups = [{"params": list(net.parameters()), "lr": 1e-3}]
    if tower_lr > 0:
        groups.append({"params": list(tower.parameters()), "lr": tower_lr})
    opt = torch.optim.AdamW(groups, weight_decay=0.01)
    steps = args.epochs * math.ceil(len(pair) / args.batch)
    base_lrs = [grp["lr"] for grp in opt.param_groups]
    t = F.normalize(t_txt, dim=1)
    figures, step, seen, began, evaluating = [], 0, 0, time.time(), 0.0

    def evaluate(epoch):
        net.eval()
        out = {"epoch": epoch}
        for key in [k for k in ("test", "held", "unseen") if f"{k}_px" in data]:
            with torch.no_grad():
                z = net((features(data[f"{key}_px"], data[f"{key}_img"]) - mu) / sd)
            r = probe.recall(z.cpu(), data[f"{key}_txt"].cpu(), data[f"{key}_pair"].cpu(), data[f"{key}_style"])
            out[key] = r
        r = out["test"]
        out["gap"] = r["google"][0] - r["twitter"][0] if "google" in r and "twitter" in r else float("nan")
        out["seconds"] = round(time.time() - began, 1)
        net.train()
        held = "".join(f"  {label} {out[k]['all'][0]:.1f}/{out[k]['all'][1]:.1f}"
                       for k, label in (("held", "held-out style"), ("unseen", "unseen style")) if k in out)
        log(f"{name} epoch {epoch}: test {fmt(out['test'])}{held}  gap {out['gap']:.1f}  ({out['seconds']} s)")
        return out

    net.train()
    for epoch in range(args.epochs):
        for batch in torch.randperm(len(pair), device=dev, generator=g).split(args.batch):
            for grp, lr in zip(opt.param_groups, base_lrs):  # warm-up, then cosine
                grp["lr"] = lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))
            images = pair[batch]
            unique, where = images.unique(return_inverse=True)
            x = px[unique].float() / 255
            if args.augment > 0:
                pick = torch.rand(len(x), generator=g, device=dev) < args.augment
                if pick.any():
                    x = x.clone()
                    x[pick] = augment(x[pick], g, args.rotate, flip, lines)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                f = tower(x)  # no graph through a frozen tower: its weights need no gradient
            inp = torch.cat([f, t_img[unique]], 1) if teacher_input else f
            z = F.normalize(net((inp - mu) / sd), dim=1)[where]
            loss = probe.masked_info_nce(t[batch], z, images, args.tau)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step, seen = step + 1, seen + len(unique)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if epoch + 1 in args.eval_at or epoch + 1 == args.epochs:
            at = time.time()
            figures.append(evaluate(epoch + 1))
            evaluating += time.time() - at
    took = time.time() - began - evaluating  # training alone
    return {"tower_lr": tower_lr, "teacher_input": teacher_input, "flip": flip, "line_art": lines,
            "epochs": args.epochs,
            "pictures_per_s": round(seen / took, 1),
            "pairs_per_s": round(step * args.batch / took, 1), "figures": figures}, tower


def fmt(r):
    return "  ".join(f"{k} {v[0]:.1f}/{v[1]:.1f}" for k, v in r.items())


def save_tower(tower, reference, path):
    """The trained tower, tensor for tensor under the reference file's names (f32)."""
    from safetensors.torch import load_file, save_file
    names = load_file(reference).keys()
    state = tower.net.state_dict()
    save_file({k: state[k].detach().float().cpu().contiguous() for k in names}, str(path))


def train(args):
    unknown = [a for a in args.arms.split(",") if a not in ARMS]
    if unknown:
        sys.exit(f"error: no arm {', '.join(unknown)}; the arms are {', '.join(ARMS)}")
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = False  # a batch's picture count varies: no re-tuning per shape
    args.out.mkdir(parents=True, exist_ok=True)
    raw = np.load(args.bundle / "data.npz")
    data = {}
    for k in raw.files:
        if k.endswith("_style"):
            data[k] = list(raw[k])
        elif k.endswith("_px"):
            data[k] = torch.from_numpy(raw[k]).to(dev).permute(0, 3, 1, 2).contiguous()
        elif k.endswith("_pair"):
            data[k] = torch.from_numpy(raw[k].astype(np.int64)).to(dev)
        else:
            data[k] = torch.from_numpy(raw[k].astype(np.float32) / SCALE).to(dev)
    weights = args.bundle / "mobilenetv2.safetensors"
    base = Tower(weights).to(dev).to(memory_format=torch.channels_last)
    log_file = open(args.out / "full-finetune.log", "a")

    def log(line):
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    if args.limit:  # a smoke test: the first captions of each split and their pictures only
        for key in ("train", "test", "held", "unseen"):
            if f"{key}_pair" in data:
                pair = data[f"{key}_pair"][:args.limit]
                n = int(pair.max()) + 1
                data[f"{key}_pair"], data[f"{key}_txt"] = pair, data[f"{key}_txt"][:args.limit]
                data[f"{key}_px"], data[f"{key}_img"] = data[f"{key}_px"][:n], data[f"{key}_img"][:n]
                data[f"{key}_style"] = data[f"{key}_style"][:n]
    device = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU"
    log(f"{device}: {len(data['train_pair'])} training captions of "
        f"{len(data['train_px'])} pictures; {args.epochs} epochs, batch {args.batch}")
    results, began = {}, time.time()
    for name in args.arms.split(","):
        if time.time() - began > args.budget_s:
            log(f"{name}: skipped, past --budget-s {args.budget_s}")
            continue
        results[name], tower = run_arm(name, base, data, dev, args, log)
        log(f"{name}: {results[name]['pairs_per_s']} pairs/s, {results[name]['pictures_per_s']} pictures/s")
        if results[name]["tower_lr"] > 0:
            save_tower(tower, weights, args.out / f"{name}.safetensors")
        (args.out / "full-finetune.json").write_text(json.dumps(results, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="bundle pictures, teacher embeddings and weights (CPU)")
    p.add_argument("--corpus", type=Path, required=True, help="emoji corpus built with --holdout-style twitter")
    p.add_argument("--teacher", required=True, help="the dense teacher (e.g. models/emoji-dense)")
    p.add_argument("--lexlip", default="target/release/lexlip")
    p.add_argument("--work", type=Path, default=Path("target/probe-style"), help="teacher caches")
    p.add_argument("--backbone", type=Path, required=True, help="scripts/fetch-image-backbone.sh's folder")
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--splits", default="train,test,held", help="of train, test, held (the held-out style)")
    p.add_argument("--unseen", type=Path, help="a manifest of a style no arm trains on, as `unseen` (e.g. "
                   "scripts/build-openmoji-eval.sh's)")
    t = sub.add_parser("train", help="the arms (GPU)")
    t.add_argument("--bundle", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--arms", default="frozen,tuned,tuned-alone,tuned-fast", help=f"of {', '.join(ARMS)}")
    t.add_argument("--budget-s", type=float, default=1e9, help="start no arm after this many seconds")
    t.add_argument("--epochs", type=int, default=12)
    t.add_argument("--eval-at", type=lambda s: {int(v) for v in s.split(",") if v}, default={3, 6, 9})
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--tower-lr", type=float, default=1e-4)
    t.add_argument("--augment", type=float, default=0.75, help="share of pictures drawn as a random view")
    t.add_argument("--rotate", type=float, default=20.0)
    t.add_argument("--tau", type=float, default=0.05)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default="cuda")
    t.add_argument("--limit", type=int, default=0, help="train on the first N captions only (a smoke test)")
    args = ap.parse_args()
    prepare(args) if args.step == "prepare" else train(args)


if __name__ == "__main__":
    main()
