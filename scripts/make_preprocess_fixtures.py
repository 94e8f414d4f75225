#!/usr/bin/env python3
"""Reference pixels of the preprocessing published PyTorch image models use, for lexlip-model's
preprocessing parity test (model/tests/preprocess_photos.rs).

Run once, in a virtualenv outside the repository (CI never runs it; it has no torch):

    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch torchvision transformers pillow numpy
    /tmp/venv-ref/bin/python scripts/make_preprocess_fixtures.py

It reads the real photos scripts/fetch-test-photos.sh fetches (scikit-image's sample photos, from
PyPI) and writes model/tests/fixtures/preprocess.json (about 55 KB): the versions it ran with and,
for each photo, the SHA-256 of the RGB pixels PIL decodes (`Image.open(p).convert("RGB")`, HWC
bytes) and those bytes at SAMPLES positions (the rule below), and, for each processor,
  resized_sha256     SHA-256 of the resized (and cropped) uint8 RGB image, HWC bytes, before
                     normalisation;
  pixels_sha256      SHA-256 of the normalised float32 (3, size, size) tensor, little-endian bytes;
  sum                the sum of that tensor (float64);
  samples            its values at SAMPLES deterministic positions of the flattened tensor: the
                     k-th at k * step + (k * 7919) % step, step = 3 * size * size // SAMPLES.
The processors:
  vdr                VDR's transform: torchvision Compose([Resize(224, Image.BICUBIC),
                     CenterCrop(224), ToTensor(), Normalize(OpenAI CLIP mean, std)]) of a PIL image.
  blip               BLIP's: transformers' BlipImageProcessorPil() (384 × 384 without keeping the
                     aspect ratio, PIL bicubic, rescale 1/255, OpenAI CLIP mean/std): the Pillow
                     path the BLIP authors trained with and that transformers 4's
                     BlipImageProcessor was.
  blip-torchvision   transformers 5's BlipImageProcessor(): the same settings, resized by
                     torchvision on a uint8 tensor (not Pillow), which lexlip does not reproduce
                     bit for bit; also uint8_max_diff_vs_pillow / uint8_fraction_diff_vs_pillow.
And "synthetic": small noise images (pattern() below, the same formula as the test's) resized to
shapes the photos do not cover (enlarging, one axis only, tall images whose vertical pass Pillow 13
runs first, odd crop margins, slivers shrunk 100 times), with the SHA-256 of Pillow's /
torchvision's output.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL
import torch
import torchvision
import transformers
from PIL import Image
from torchvision import transforms as T
from transformers import BlipImageProcessor
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "model" / "tests" / "fixtures" / "preprocess.json"
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "hubble_deep_field.jpg"]
SAMPLES = 256
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def f32(v):
    """The shortest decimal that reads back as the same float32."""
    return float(str(np.float32(v)))


def positions(n):
    """SAMPLES deterministic positions spread over n values: the k-th at k·step + (k·7919) mod step."""
    step = n // SAMPLES
    return [k * step + (k * 7919) % step for k in range(SAMPLES)]


def tensor_entry(uint8_hwc, pixels):
    """The fixture entry of one resized image and its normalised (3, size, size) tensor."""
    pixels = np.ascontiguousarray(pixels, dtype="<f4")
    flat = pixels.reshape(-1)
    return {
        "size": pixels.shape[-1],
        "resized_sha256": sha256(uint8_hwc),
        "pixels_sha256": sha256(pixels),
        "sum": float(flat.astype(np.float64).sum()),
        "samples": [f32(flat[p]) for p in positions(flat.size)],
    }


def vdr(img):
    resize_crop = T.Compose([T.Resize(224, interpolation=Image.BICUBIC), T.CenterCrop(224)])
    full = T.Compose([*resize_crop.transforms, T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
    return np.asarray(resize_crop(img)), full(img).numpy()


def blip(processor, img):
    """uint8 HWC after the resize (no rescale, no normalisation) and the default tensor."""
    resized = processor(img, do_rescale=False, do_normalize=False, return_tensors="np")
    resized = np.asarray(resized["pixel_values"][0])
    assert resized.dtype == np.uint8, resized.dtype
    pixels = processor(img, return_tensors="np")["pixel_values"][0]
    return resized.transpose(1, 2, 0), pixels


def check_blip_defaults(processor):
    """The defaults the test mirrors: 384 × 384 squash, bicubic, 1/255, OpenAI CLIP mean/std."""
    assert (processor.size["height"], processor.size["width"]) == (384, 384), processor.size
    assert processor.resample == Image.BICUBIC, processor.resample
    assert processor.do_resize and processor.do_rescale and processor.do_normalize
    assert abs(processor.rescale_factor - 1 / 255) < 1e-12
    assert not getattr(processor, "do_center_crop", False)
    assert tuple(processor.image_mean) == CLIP_MEAN and tuple(processor.image_std) == CLIP_STD


def pattern(w, h, seed):
    """Noise with edges everywhere, so that windows overshoot and clip (the test's formula)."""
    x = np.arange(w, dtype=np.uint32)[None, :, None]
    y = np.arange(h, dtype=np.uint32)[:, None, None]
    c = np.arange(3, dtype=np.uint32)[None, None, :]
    n = (x * 37) ^ (y * 91) ^ (c * 53) ^ np.uint32(seed)
    v = (n.astype(np.uint64) * 2654435761) & 0xFFFFFFFF
    return Image.fromarray((v >> 24).astype(np.uint8))


# (operation, input width, input height, output width or crop size, output height, seed)
SYNTHETIC = [
    ("pillow_bicubic", 40, 120, 30, 50, 1),  # the height shrinks most: vertical pass first
    ("pillow_bicubic", 50, 80, 120, 20, 2),  # wider and shorter: vertical pass first
    ("pillow_bicubic", 7, 5, 19, 13, 3),  # enlarged
    ("pillow_bicubic", 300, 40, 100, 40, 4),  # horizontal pass only
    ("pillow_bicubic", 40, 300, 40, 100, 5),  # vertical pass only
    ("pillow_bicubic", 1, 1, 5, 3, 6),
    ("pillow_bicubic", 97, 61, 1, 1, 7),
    ("pillow_bicubic", 1000, 750, 384, 384, 8),
    ("pillow_bicubic", 40000, 2, 384, 384, 16),  # windows of 417 weights, in blocks
    ("pillow_bicubic", 2, 40000, 300, 300, 17),  # likewise, vertical pass first
    ("resize_and_crop", 60, 200, 32, None, 9),  # tall: vertical first, margin 74
    ("resize_and_crop", 50, 131, 32, None, 10),  # margin 51: 25.5 rounds to 26
    ("resize_and_crop", 131, 50, 32, None, 11),
    ("resize_and_crop", 32, 37, 32, None, 12),  # no resize; margin 5: 2.5 rounds to 2
    ("resize_and_crop", 20, 15, 32, None, 13),  # smaller than the crop: enlarged first
    ("resize_and_crop", 3, 300, 16, None, 14),  # resized to 16 × 1600
    ("resize_and_crop", 1000, 750, 224, None, 15),
]


def synthetic():
    cases = []
    for op, w, h, a, b, seed in SYNTHETIC:
        img = pattern(w, h, seed)
        if op == "pillow_bicubic":
            out = img.resize((a, b), Image.BICUBIC)
        else:
            out = T.Compose([T.Resize(a, interpolation=Image.BICUBIC), T.CenterCrop(a)])(img)
        case = {"op": op, "width": w, "height": h, "seed": seed, "out": [a, b or a]}
        case["out_sha256"] = sha256(np.asarray(out))
        assert np.asarray(out).shape == (b or a, a, 3)
        cases.append(case)
    return cases


def photos_dir():
    return Path(
        os.environ.get("LEXLIP_TEST_PHOTOS_DIR")
        or subprocess.check_output(["bash", str(ROOT / "scripts" / "fetch-test-photos.sh")], text=True).strip()
    )


def main():
    torch.set_grad_enabled(False)
    blip_pil, blip_tv = BlipImageProcessorPil(), BlipImageProcessor()
    check_blip_defaults(blip_pil)
    check_blip_defaults(blip_tv)
    assert blip_tv.backend == "torchvision" and blip_pil.backend == "pil"
    photos = []
    for name in PHOTOS:
        img = Image.open(photos_dir() / name).convert("RGB")
        decoded = np.asarray(img).reshape(-1)
        entry = {
            "file": name,
            "width": img.width,
            "height": img.height,
            "decoded_sha256": sha256(decoded),
            "decoded_samples": [int(decoded[p]) for p in positions(decoded.size)],
        }
        processors = {}
        processors["vdr"] = tensor_entry(*vdr(img))
        pil_u8, pil_px = blip(blip_pil, img)
        processors["blip"] = tensor_entry(pil_u8, pil_px)
        tv_u8, tv_px = blip(blip_tv, img)
        tv = tensor_entry(tv_u8, tv_px)
        diff = np.abs(tv_u8.astype(int) - pil_u8.astype(int))
        tv["uint8_max_diff_vs_pillow"] = int(diff.max())
        tv["uint8_fraction_diff_vs_pillow"] = round(float((diff != 0).mean()), 6)
        processors["blip-torchvision"] = tv
        entry["processors"] = processors
        photos.append(entry)
        print(name, img.size, {k: v["resized_sha256"][:12] for k, v in processors.items()}, file=sys.stderr)
    fixture = {
        "versions": {
            "pillow": PIL.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
        "samples": SAMPLES,
        "mean": list(CLIP_MEAN),
        "std": list(CLIP_STD),
        "photos": photos,
        "synthetic": synthetic(),
    }
    OUT.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    print(f"{OUT}: {OUT.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
