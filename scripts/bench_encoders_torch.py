#!/usr/bin/env python3
"""lexlip's encoder towers in PyTorch, timed: the PyTorch side of
`scripts/bench-encoders-vs-torch.sh` (which runs `lexlip bench encode` on the same model
directories in the same run and prints the ratios).

It builds, once (a tower whose directory exists is reused), random-weight models (seed 0) and
saves them in the layout lexlip loads, under --out:
  bert-base/      BertForMaskedLM(BertConfig()) (save_pretrained) + the word pieces of --splade
  beit-base/      BEiT-B/16 at 224 px + BERT's MLM head over the 30,522 word pieces of --splade:
                  transformers' BeitModel (`beit.*`), the final `layernorm.*` and BertOnlyMLMHead
                  (`cls.*`), the names and config of model/src/beit/random.rs
  clip-b32/       CLIPModel(CLIPConfig()) (ViT-B/32 at 224 px) + a word-level tokenizer.json of
                  CLIP's 49,408 ids ending texts with <|endoftext|>, the largest id
  mobilenet-v2/   a `lexlip-fused` dense model of the demo's shape (models/emoji-lex-imagenet/
                  dense): a dual-encoder teacher (BERT 2 x 128 text, BEiT 4 x 128 image at 64 px,
                  256-d), torchvision's MobileNetV2 renamed to the `image-backbone/` layout
                  (tonylins'), and the MLP adapter (1536 -> 1024 -> 256)
  mobileclip-s1/  open_clip's MobileCLIP-S1 (FastViT MCi1 at 256 px, 12-layer text tower) in the
                  layout of the Hub's OpenCLIP repositories (open_clip_config.json,
                  open_clip_model.safetensors, tokenizer.json as clip-b32's)
bert-tiny is the real tiny SPLADE model (--splade, scripts/fetch-test-model.sh). Then it loads
each directory back and times, on this machine's cores, in f32, items/s at each batch size of the
work `lexlip bench encode` times (server/src/cli/bench_encode.rs):
  text   tokenisation of the captions (the same captions, the directory's tokenizer.json, cut to
         40 tokens for BERT), the tower, then SPLADE pooling (log(1 + relu) max-pooled over the
         real tokens) into sparse rows (`to_sparse`); for CLIP and MobileCLIP the text features,
         L2-normalised
  image  already preprocessed pixels (lexlip's synthetic ones, same values) through the tower:
         BEiT's MLM logits over every token max-pooled as above into sparse rows; the dense
         towers' image features L2-normalised; mobilenet-v2 is the fused model's whole image side
         (teacher BEiT at 64 px, ImageNet renormalisation, bilinear resize to 224, MobileNetV2,
         adapter), as lexlip can load a MobileNetV2 only there
Image decoding and resizing are outside both timings. As a PyTorch user runs them for inference,
MobileNetV2's BatchNorms are folded into its convolutions (torch.fx's `fuse`) and MobileCLIP's
FastViT is reparameterised (timm's `reparameterize_model`); lexlip does both at load. Everything
else is the eager module (transformers' default attention), under no_grad. With random weights
the lexicons are dense (nearly all 30,522 terms non-zero, where a trained model keeps a few
hundred): lexlip's timing then includes building that many named terms per item, PyTorch's a
COO tensor only. Prints one JSON object.

    python scripts/bench_encoders_torch.py --out DIR --splade target/test-models/splade-tiny

Needs torch, torchvision, transformers 4.x, safetensors, tokenizers, open_clip_torch and timm;
no pretrained weights are downloaded. Weights are random: the vectors mean nothing, the
arithmetic is the real one.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch_bench import captions, timed

torch.set_grad_enabled(False)

TOWERS = ["bert-tiny", "bert-base", "beit-base", "clip-b32", "mobilenet-v2", "mobileclip-s1"]
MAX_LENGTH = 40  # lexlip's default tokens per text (model/src/text.rs)
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
# The demo's fused teacher (models/emoji-lex-imagenet/dense/teacher/config.json).
TEACHER_TEXT = dict(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=512, hidden_act="gelu", layer_norm_eps=1e-12)
TEACHER_VISION = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=512, hidden_act="gelu", layer_norm_eps=1e-12,
                      image_size=64, patch_size=16, use_relative_position_bias=True,
                      use_mean_pooling=True, layer_scale_init_value=0.1)
TEACHER_DIM = 256
ADAPTER_HIDDEN = 1024
BACKBONE_SIZE = 224


def synthetic_images(n, size):
    """`lexlip bench encode`'s preprocessed images, value for value: `(n, 3, size, size)` in
    [-1, 1]."""
    j = np.arange(3 * size * size, dtype=np.int64)
    rows = [((i * 7919 + j * 104_729) % 2001).astype(np.float32) / 1000.0 - 1.0
            for i in range(n)]
    return torch.from_numpy(np.stack(rows).reshape(n, 3, size, size))


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------
def clip_tokenizer():
    """A word-level tokenizer of CLIP's 49,408 ids in CLIP's manner: the captions' words are
    single tokens (as in CLIP's BPE), texts start with <|startoftext|> (49406) and end with
    <|endoftext|> (49407, the largest id, where CLIP and open_clip pool the text tower)."""
    from tokenizers import models, normalizers, pre_tokenizers, processors
    words = ["!"] + sorted(set(" ".join(captions(64)).split()))
    words += [f"w{i}" for i in range(49406 - len(words))] + ["<|startoftext|>", "<|endoftext|>"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="!"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 49406), ("<|endoftext|>", 49407)])
    return tk


def load_tokenizer(path, max_length, pad_to=None):
    """`path` cut to `max_length` tokens and right-padded with id 0, to the longest text of a
    batch (or to `pad_to`), as lexlip pads."""
    tk = Tokenizer.from_file(str(path))
    tk.enable_truncation(max_length)
    tk.enable_padding(pad_id=0, length=pad_to)
    return tk


def ids_and_mask(tk, texts):
    enc = tk.encode_batch(texts)
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    return ids, mask


# ---------------------------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------------------------
def splade(logits, mask=None):
    """SPLADE pooling: log(1 + max over real tokens of relu(logits)) → `(batch, vocab)`."""
    x = logits.relu()
    if mask is not None:
        x = x * mask.unsqueeze(-1).to(x.dtype)
    return torch.log1p(x.amax(1))


class BeitMlm(torch.nn.Module):
    """LexLIP's image tower: BEiT (`beit.*`), the final layer norm over every token
    (`layernorm.*`) and BERT's MLM head (`cls.*`)."""

    def __init__(self, config):
        from transformers import BeitModel
        from transformers.models.bert.modeling_bert import BertConfig, BertOnlyMLMHead
        super().__init__()
        self.beit = BeitModel(config, add_pooling_layer=False)
        self.layernorm = torch.nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.cls = BertOnlyMLMHead(BertConfig(hidden_size=config.hidden_size,
                                              vocab_size=config.vocab_size,
                                              hidden_act="gelu", layer_norm_eps=1e-12))

    def forward(self, pixels):
        hidden = self.layernorm(self.beit(pixel_values=pixels).last_hidden_state)
        return splade(self.cls(hidden))


class FusedImage(torch.nn.Module):
    """The image side of a `lexlip-fused` model (model/src/fused.rs): the teacher's unit image
    embedding and MobileNetV2's pooled features of the same pixels (back to [0, 1], ImageNet's
    normalisation, bilinear resize to 224), concatenated, standardised, through the MLP."""

    def __init__(self):
        from torchvision.models import mobilenet_v2
        from transformers import BeitConfig, BeitModel
        super().__init__()
        self.beit = BeitModel(BeitConfig(**TEACHER_VISION), add_pooling_layer=False)
        self.layernorm = torch.nn.LayerNorm(128, eps=1e-12)
        self.visual_projection = torch.nn.Linear(128, TEACHER_DIM, bias=False)
        self.backbone = mobilenet_v2().features
        inputs = TEACHER_DIM + 1280
        self.register_buffer("mean", torch.zeros(inputs))
        self.register_buffer("std", torch.ones(inputs))
        self.fc1 = torch.nn.Linear(inputs, ADAPTER_HIDDEN)
        self.fc2 = torch.nn.Linear(ADAPTER_HIDDEN, TEACHER_DIM)
        channel = lambda v: torch.tensor(v).view(1, 3, 1, 1)  # noqa: E731
        self.register_buffer("imagenet_mean", channel(IMAGENET_MEAN))
        self.register_buffer("imagenet_std", channel(IMAGENET_STD))

    def forward(self, pixels):
        hidden = self.layernorm(self.beit(pixel_values=pixels).last_hidden_state)
        t = F.normalize(self.visual_projection(hidden[:, 0]), dim=-1)
        x = (pixels * 0.5 + 0.5 - self.imagenet_mean) / self.imagenet_std
        x = F.interpolate(x, size=(BACKBONE_SIZE, BACKBONE_SIZE), mode="bilinear",
                          align_corners=False)
        f = self.backbone(x).mean((2, 3))
        x = (torch.cat([t, f], 1) - self.mean) / self.std
        return F.normalize(self.fc2(F.gelu(self.fc1(x))), dim=-1)


def tonylins_name(name):
    """torchvision's MobileNetV2 feature names → the `features.N.conv.M` layout lexlip loads
    (model/src/mobilenet_v2.rs)."""
    parts = name.split(".")
    n = int(parts[1])
    if n in (0, 18):
        return name
    expands = n > 1
    # torchvision: conv.0.{0,1} [conv.1.{0,1}] conv.{1|2} conv.{2|3}
    rest = parts[3:]
    if expands:
        table = {("0", "0"): "0", ("0", "1"): "1", ("1", "0"): "3", ("1", "1"): "4"}
        flat = {"2": "6", "3": "7"}
    else:
        table = {("0", "0"): "0", ("0", "1"): "1"}
        flat = {"1": "3", "2": "4"}
    if len(rest) >= 3 and (rest[0], rest[1]) in table:
        m, tail = table[(rest[0], rest[1])], rest[2:]
    else:
        m, tail = flat[rest[0]], rest[1:]
    return ".".join(["features", str(n), "conv", m] + tail)


# ---------------------------------------------------------------------------------------------
# Building the directories
# ---------------------------------------------------------------------------------------------
def copy_word_pieces(splade: Path, into: Path):
    shutil.copy(splade / "tokenizer.json", into / "tokenizer.json")
    if (splade / "tokenizer_config.json").is_file():
        shutil.copy(splade / "tokenizer_config.json", into / "tokenizer_config.json")


def load_into(model, tensors):
    """Loads `tensors` into `model`, all of them; only BatchNorm counters may be missing."""
    result = model.load_state_dict(tensors, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("num_batches_tracked")]
    if missing or result.unexpected_keys:
        raise SystemExit(f"weights do not fit: missing {missing}, "
                         f"unexpected {result.unexpected_keys}")
    return model


def state(module, prefix=""):
    return {prefix + k: v.detach().float().contiguous() for k, v in module.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def build_bert_base(into: Path, splade: Path):
    from transformers import BertConfig, BertForMaskedLM
    BertForMaskedLM(BertConfig()).save_pretrained(into, safe_serialization=True)
    copy_word_pieces(splade, into)


def beit_base_config():
    from transformers import BeitConfig
    return BeitConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, hidden_act="gelu", layer_norm_eps=1e-12,
                      image_size=224, patch_size=16, num_channels=3,
                      use_absolute_position_embeddings=False, use_relative_position_bias=True,
                      use_shared_relative_position_bias=False, layer_scale_init_value=0.1,
                      use_mean_pooling=True, vocab_size=30522)


def build_beit_base(into: Path, splade: Path):
    config = beit_base_config()
    model = BeitMlm(config)
    with torch.no_grad():
        for layer in model.beit.encoder.layer:
            table = layer.attention.attention.relative_position_bias.relative_position_bias_table
            table.normal_(0, 0.02)
    tensors = state(model)
    tensors.pop("cls.predictions.decoder.bias")  # the same tensor as cls.predictions.bias
    into.mkdir(parents=True)
    save_file(tensors, str(into / "model.safetensors"))
    cfg = {k: getattr(config, k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "hidden_act", "layer_norm_eps", "image_size", "patch_size", "num_channels",
        "use_absolute_position_embeddings", "use_relative_position_bias",
        "use_shared_relative_position_bias", "layer_scale_init_value", "use_mean_pooling",
        "vocab_size")}
    cfg.update(architectures=["BeitForMaskedImageModeling"], model_type="beit",
               lexlip_mlm_head={"hidden_act": "gelu", "layer_norm_eps": 1e-12})
    (into / "config.json").write_text(json.dumps(cfg, indent=1))
    (into / "preprocessor_config.json").write_text(json.dumps(
        {"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "size": {"height": 224, "width": 224}}))
    copy_word_pieces(splade, into)


def build_clip(into: Path):
    from transformers import CLIPConfig, CLIPModel
    CLIPModel(CLIPConfig()).save_pretrained(into, safe_serialization=True)
    clip_tokenizer().save(str(into / "tokenizer.json"))


def build_mobilenet(into: Path, splade: Path):
    from transformers import BertConfig, BertModel
    model = FusedImage()
    with torch.no_grad():
        model.mean.normal_(0, 0.1)
        model.std.uniform_(0.5, 1.5)
        for layer in model.beit.encoder.layer:
            table = layer.attention.attention.relative_position_bias.relative_position_bias_table
            table.normal_(0, 0.02)
    text = BertModel(BertConfig(**TEACHER_TEXT), add_pooling_layer=False)
    teacher = into / "teacher"
    backbone = into / "image-backbone"
    adapter = into / "adapter"
    for d in (teacher, backbone, adapter):
        d.mkdir(parents=True)
    tensors = state(text, "text_model.bert.")
    tensors.update(state(model.beit, "vision_model.beit."))
    tensors.update(state(model.layernorm, "vision_model.layernorm."))
    tensors["text_projection.weight"] = torch.randn(TEACHER_DIM, 128) * 0.02
    tensors["visual_projection.weight"] = model.visual_projection.weight.detach().clone()
    save_file(tensors, str(teacher / "model.safetensors"))
    (teacher / "config.json").write_text(json.dumps({
        "architectures": ["LexLipDualEncoder"], "model_type": "lexlip-dual-encoder",
        "max_length": 24, "pooling": "cls", "projection_dim": TEACHER_DIM,
        "text_config": dict(TEACHER_TEXT, model_type="bert", max_position_embeddings=512,
                            pad_token_id=0, type_vocab_size=2),
        "vision_config": dict(TEACHER_VISION, model_type="beit", num_channels=3,
                              use_absolute_position_embeddings=False,
                              use_shared_relative_position_bias=False)}, indent=1))
    copy_word_pieces(splade, teacher)
    save_file({tonylins_name(k): v for k, v in state(model.backbone, "features.").items()},
              str(backbone / "model.safetensors"))
    save_file({"input.mean": model.mean.clone(), "input.std": model.std.clone(),
               **state(model.fc1, "fc1."), **state(model.fc2, "fc2.")},
              str(adapter / "model.safetensors"))
    (into / "config.json").write_text(json.dumps(
        {"model_type": "lexlip-fused", "hidden": ADAPTER_HIDDEN, "backbone_size": BACKBONE_SIZE}))


def build_mobileclip(into: Path):
    import open_clip
    model = open_clip.create_model("MobileCLIP-S1", pretrained=None)
    into.mkdir(parents=True)
    save_file(state(model), str(into / "open_clip_model.safetensors"))
    (into / "open_clip_config.json").write_text(json.dumps(
        {"model_cfg": open_clip.get_model_config("MobileCLIP-S1"),
         "preprocess_cfg": {"mean": [0.0] * 3, "std": [1.0] * 3, "interpolation": "bilinear",
                            "resize_mode": "shortest"}}, indent=1))
    clip_tokenizer().save(str(into / "tokenizer.json"))


def build(name: Path, make):
    """Runs `make(tmp)` and moves the result to `name`, unless `name` exists."""
    if name.exists():
        return
    tmp = name.with_name(name.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"building {name}", file=sys.stderr)
    make(tmp)
    tmp.rename(name)


# ---------------------------------------------------------------------------------------------
# Loading them back, as the timed functions
# ---------------------------------------------------------------------------------------------
def bert_text(path: Path):
    from transformers import BertForMaskedLM
    model = BertForMaskedLM.from_pretrained(path).eval()
    tk = load_tokenizer(path / "tokenizer.json", MAX_LENGTH)

    def encode(texts):
        ids, mask = ids_and_mask(tk, texts)
        logits = model(input_ids=ids, attention_mask=mask).logits
        return splade(logits, mask).to_sparse()
    return encode


def beit_image(path: Path):
    model = BeitMlm(beit_base_config()).eval()
    tensors = load_file(str(path / "model.safetensors"))
    tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
    load_into(model, tensors)
    return lambda px: model(px).to_sparse()


def clip_towers(path: Path):
    from transformers import CLIPModel
    model = CLIPModel.from_pretrained(path).eval()
    tk = load_tokenizer(path / "tokenizer.json", model.config.text_config.max_position_embeddings)

    def text(texts):
        ids, mask = ids_and_mask(tk, texts)
        return F.normalize(model.get_text_features(input_ids=ids, attention_mask=mask), dim=-1)

    def image(px):
        return F.normalize(model.get_image_features(pixel_values=px), dim=-1)
    return text, image


def fused_image(path: Path):
    from torch.fx.experimental.optimization import fuse
    model = FusedImage().eval()
    teacher = load_file(str(path / "teacher" / "model.safetensors"))
    tensors = {k[len("vision_model."):]: v for k, v in teacher.items()
               if k.startswith("vision_model.")}
    tensors["visual_projection.weight"] = teacher["visual_projection.weight"]
    backbone = load_file(str(path / "image-backbone" / "model.safetensors"))
    names = {tonylins_name(k): k for k in state(model.backbone, "features.")}
    tensors.update({"backbone." + names[k][len("features."):]: v for k, v in backbone.items()})
    adapter = load_file(str(path / "adapter" / "model.safetensors"))
    tensors.update({"mean": adapter.pop("input.mean"), "std": adapter.pop("input.std")})
    tensors.update(adapter)
    tensors.update({k: v for k, v in model.state_dict().items() if k.startswith("imagenet_")})
    load_into(model, tensors)
    model.backbone = fuse(model.backbone)
    return model


def mobileclip_towers(path: Path):
    import open_clip
    from timm.utils.model import reparameterize_model
    model = open_clip.create_model("MobileCLIP-S1", pretrained=None)
    load_into(model, load_file(str(path / "open_clip_model.safetensors"))).eval()
    model.visual.trunk = reparameterize_model(model.visual.trunk)
    context = model.context_length
    tk = load_tokenizer(path / "tokenizer.json", context, pad_to=context)

    def text(texts):
        ids, _ = ids_and_mask(tk, texts)
        return F.normalize(model.encode_text(ids), dim=-1)

    def image(px):
        return F.normalize(model.encode_image(px), dim=-1)
    return text, image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path, help="the models' directory")
    ap.add_argument("--splade", required=True, type=Path,
                    help="the tiny SPLADE model (scripts/fetch-test-model.sh)")
    ap.add_argument("--batch-sizes", default="1,32")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--towers", default=",".join(TOWERS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    wanted = args.towers.split(",")
    unknown = set(wanted) - set(TOWERS)
    if unknown:
        ap.error(f"unknown towers {sorted(unknown)}; known: {','.join(TOWERS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    makers = {
        "bert-base": lambda d: build_bert_base(d, args.splade),
        "beit-base": lambda d: build_beit_base(d, args.splade),
        "clip-b32": build_clip,
        "mobilenet-v2": lambda d: build_mobilenet(d, args.splade),
        "mobileclip-s1": build_mobileclip,
    }
    for name in wanted:
        if name in makers:
            torch.manual_seed(0)
            build(args.out / name, makers[name])

    texts = captions(max(batches))
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "towers": {}}
    for name in wanted:
        path = args.splade if name == "bert-tiny" else args.out / name
        text = image = None
        size = 224
        if name in ("bert-tiny", "bert-base"):
            text = bert_text(path)
        elif name == "beit-base":
            image = beit_image(path)
        elif name == "clip-b32":
            text, image = clip_towers(path)
        elif name == "mobilenet-v2":
            image, size = fused_image(path), TEACHER_VISION["image_size"]
        elif name == "mobileclip-s1":
            text, image = mobileclip_towers(path)
            size = 256
        pixels = synthetic_images(max(batches), size) if image else None
        rows = {}
        for b in batches:
            if text:
                rows.setdefault("text", []).append(
                    [b, timed(lambda: text(texts[:b]), b, args.seconds)])
            if image:
                rows.setdefault("image", []).append(
                    [b, timed(lambda: image(pixels[:b]), b, args.seconds)])
        report["towers"][name] = rows
        print(name, json.dumps(rows), file=sys.stderr)
        text = image = None
    print(json.dumps(report))


if __name__ == "__main__":
    main()
