#!/usr/bin/env python3
"""Golden outputs of the Hugging Face `transformers` reference for the lexlip-model parity tests.

Run once, in a virtualenv outside the repository (CI never runs it; it has no torch):

    python3 -m venv /tmp/venv-ref
    /tmp/venv-ref/bin/pip install torch transformers safetensors pillow
    /tmp/venv-ref/bin/python scripts/make_fixtures.py

It writes small files under model/tests/fixtures/:
  splade.json            the real tiny SPLADE model (scripts/fetch-test-model.sh): token ids, a subset
                         of MLM logits, and the full-vocabulary pooled vectors (eq. 6) of a few texts,
                         one batch padded.
  vocab1000/tokenizer.json  a 1000-token word-piece vocabulary (BERT's special tokens + common words).
  beit-tiny/             a random tiny BEiT (HF BeitForMaskedImageModeling layout) + BERT-style MLM
                         head (`cls.predictions.*`), weights rounded to f16 and stored as f16.
  beit.json              pixel tensors of fixed images, logits subsets and pooled vectors (eq. 3),
                         also at a larger size with LexLIP's interpolated relative position bias.
  images/                the fixed images (PNG, lossless) and a corrupt file.
  clip-tiny/, clip.json  a random tiny CLIP and its L2-normalised text/image embeddings.
  lexlip-tiny/lexlip-tiny.ckpt (+ tokenizer.json)  a Lightning-style checkpoint of a tiny LexLIP
                         (image_transformer., text_transformer., mlm_head_for_image.), ckpt.json.

All weights are rounded to float16 before the reference runs in float32, so the f16 files hold
exactly the weights the reference used.
"""

import copy
import json
import math
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import save_file
from transformers import (
    BeitConfig,
    BeitForMaskedImageModeling,
    BertConfig,
    BertForMaskedLM,
    CLIPConfig,
    CLIPModel,
)
from transformers.models.bert.modeling_bert import BertOnlyMLMHead
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "model" / "tests" / "fixtures"
MAX_LENGTH = 40  # lexlip_model::DEFAULT_MAX_LENGTH (LexLIP's max_text_len)

torch.manual_seed(0)
np.random.seed(0)
torch.set_grad_enabled(False)


def r(x, nd=7):
    """Floats for JSON, rounded enough to keep the files small but far below the 1e-4 tolerance."""
    return [round(float(v), nd) for v in x]


def pooled(logits, mask):
    """LexLIP eq. 3/6 as the authors' code computes it."""
    logits = logits + (1 - mask.unsqueeze(-1)) * (-1e6)
    logits = torch.max(logits, torch.zeros_like(logits))
    return torch.log(1 + torch.max(logits, dim=1)[0])


def sparse_json(vec):
    ids = torch.nonzero(vec > 0).flatten().tolist()
    return {"ids": ids, "weights": r(vec[ids].tolist())}


def randomize(module, scale=0.2):
    """Random weights everywhere (HF initialises biases, tables and norms to constants, which would
    hide mistakes), then rounded to f16 precision."""
    for name, p in module.named_parameters():
        if p.dim() == 1 and ("LayerNorm" in name or "layernorm" in name or "norm" in name) and name.endswith("weight"):
            p.data = 1.0 + 0.1 * torch.randn_like(p)
        elif "lambda" in name:
            p.data = 0.1 + 0.05 * torch.randn_like(p)
        else:
            p.data = scale * torch.randn_like(p)
        p.data = p.data.half().float()


def save_f16(model, tokenizer, dst):
    """Saves `model` as f16 safetensors with `tokenizer` in `dst` (the reference then runs on the
    same, f16-rounded, weights in f32)."""
    dst.mkdir(parents=True, exist_ok=True)
    model.half()
    model.save_pretrained(dst, safe_serialization=True)
    model.float()
    tokenizer.save(str(dst / "tokenizer.json"))


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, separators=(",", ":")) + "\n")


# The texts whose embeddings the dual-encoder fixtures (CLIP, SigLIP, MobileCLIP) hold.
DUAL_TEXTS = ["a photo of a dog", "red car on the grass", "cat"]


def padded_ids(tokenizer, texts, length, pad):
    """Token ids of `texts`, cut to `length` and padded to it with `pad`."""
    ids = []
    for t in texts:
        row = tokenizer.encode(t).ids[:length]
        ids.append(row + [pad] * (length - len(row)))
    return ids


def write_embeddings(path, texts, text_ids, text_emb, image_paths, image_emb):
    """A dual encoder's fixture: the texts, their ids and embeddings, the images' file names and
    embeddings."""
    write_json(
        path,
        {
            "texts": texts,
            "text_ids": text_ids,
            "text_embeddings": [r(v.tolist()) for v in text_emb],
            "images": [p.name for p in image_paths],
            "image_embeddings": [r(v.tolist()) for v in image_emb],
        },
    )


# ---------------------------------------------------------------------------------------------
# 1. the real tiny SPLADE text model
# ---------------------------------------------------------------------------------------------
def splade():
    model_dir = Path(
        os.environ.get("LEXLIP_TEST_MODEL_DIR")
        or subprocess.check_output(["bash", str(ROOT / "scripts" / "fetch-test-model.sh")], text=True).strip()
    )
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(MAX_LENGTH)
    tok.no_padding()
    model = BertForMaskedLM.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    texts = [
        "a dog running on the grass",
        "Two people ride bicycles down a busy city street at night.",
        "kitchen",
        "A very long caption that keeps going and going, describing every single object in the "
        "picture: a red car, a blue bus, three pedestrians, a traffic light, some trees, a bakery, "
        "a cat sleeping on a windowsill and a child holding a yellow balloon near the fountain.",
        "Ünïcödé, punctuation!? and numbers 12345",
    ]
    encs = [tok.encode(t) for t in texts]
    cases = []
    # One by one (no padding).
    singles = []
    for t, e in zip(texts, encs):
        ids = torch.tensor([e.ids])
        mask = torch.ones_like(ids)
        logits = model(input_ids=ids, attention_mask=mask).logits
        p = pooled(logits, mask.float())[0]
        singles.append(p)
        top = torch.argsort(p, descending=True)[:8].tolist()
        cols = sorted(set(list(range(0, 5)) + [101, 102, 1996, 3899] + top))
        cases.append(
            {
                "text": t,
                "ids": e.ids,
                "logit_columns": cols,
                "logits": [r(row[cols].tolist(), 6) for row in logits[0]],
                "pooled": sparse_json(p),
            }
        )
    # A padded batch of all texts.
    L = max(len(e.ids) for e in encs)
    ids = torch.zeros((len(encs), L), dtype=torch.long)
    mask = torch.zeros((len(encs), L), dtype=torch.long)
    for i, e in enumerate(encs):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    batch_pooled = pooled(model(input_ids=ids, attention_mask=mask).logits, mask.float())
    diff = (batch_pooled - torch.stack(singles)).abs().max().item()
    write_json(
        OUT / "splade.json",
        {
            "max_length": MAX_LENGTH,
            "cases": cases,
            "batch_pooled": [sparse_json(p) for p in batch_pooled],
            "reference_batch_vs_single_max_diff": diff,
        },
    )
    return model_dir


# ---------------------------------------------------------------------------------------------
# A 1000-token word-piece vocabulary: BERT ids 0..=103 ([PAD], [unused*], [UNK], [CLS], [SEP],
# [MASK]) keep their ids, then 896 common words from BERT id 1996 ("the") on.
# ---------------------------------------------------------------------------------------------
def vocab1000(splade_dir):
    spec = json.loads((splade_dir / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    keep = [t for t, i in by_id if i <= 103] + [t for t, i in by_id if 1996 <= i < 1996 + 896]
    assert len(keep) == 1000
    spec["model"]["vocab"] = {t: i for i, t in enumerate(keep)}
    spec["truncation"] = None
    spec["padding"] = None
    # added_tokens keep their ids (0, 100..103) because the special tokens did not move.
    spec["added_tokens"] = [a for a in spec["added_tokens"] if a["id"] <= 103]
    path = OUT / "vocab1000" / "tokenizer.json"
    write_json(path, spec)
    return path, keep


def mlm_head(hidden, vocab, act="gelu"):
    cfg = BertConfig(hidden_size=hidden, vocab_size=vocab, hidden_act=act, layer_norm_eps=1e-12)
    head = BertOnlyMLMHead(cfg).eval()
    # A separate decoder weight (LexLIP's image head is a deep copy of BERT's `cls`).
    randomize(head, 0.3)
    if head.predictions.decoder.bias is None or head.predictions.decoder.bias is not head.predictions.bias:
        head.predictions.decoder.bias = head.predictions.bias
    return head


def beit_logits(model, head, pixels):
    out = model.beit(pixel_values=pixels)
    seq = model.layernorm(out.last_hidden_state)
    return head(seq)


def images(n_sizes):
    """Deterministic RGB test images (smooth gradients + noise + shapes), saved as PNG."""
    rng = np.random.default_rng(7)
    out = []
    for i, size in enumerate(n_sizes):
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        base = np.stack([xx, yy, (xx + yy) / 2], -1) * 255
        base = base * (0.3 + 0.2 * i) + rng.integers(0, 90, (size, size, 3))
        base[size // 4 : size // 2, size // 3 : 2 * size // 3, i % 3] = 250
        arr = np.clip(base, 0, 255).astype(np.uint8)
        path = OUT / "images" / f"img{i}_{size}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(arr, "RGB").save(path)
        out.append(path)
    return out


def pixels_of(path, mean, std):
    arr = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255.0
    arr = (arr - np.array(mean, dtype=np.float32)) / np.array(std, dtype=np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def lexlip_interpolate_table(table, window):
    """LexLIP's BeitRelativePositionBias.interpolate_pos_encoding (1-D linear over the table)."""
    new = (2 * window[0] - 1) * (2 * window[1] - 1) + 3 + 0.1
    scale = new / table.size(0)
    t = F.interpolate(table.transpose(-1, -2).unsqueeze(0), scale_factor=scale, mode="linear", align_corners=False)
    assert int(new) == t.shape[-1]
    return t.squeeze(0).transpose(-1, -2)


def legacy_state(model):
    """The state dict under the names `save_pretrained` writes (the Hub layout, which older
    transformers - and LexLIP's checkpoints - use); transformers 5 renames modules internally."""
    import tempfile

    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        state = {}
        for f in sorted(Path(d).glob("*.safetensors")):
            state.update(load_file(str(f)))
        return state


def save_image_dir(dst, model, head, tokenizer_path, config_extra, mean, std):
    dst.mkdir(parents=True, exist_ok=True)
    model.config.update(config_extra)
    model.half()
    model.save_pretrained(dst, safe_serialization=True)
    model.float()
    # Re-save with the MLM head added (same file, HF names + `cls.` for the BERT-style head); the
    # MIM head `lm_head` of BEiT pre-training is not used by LexLIP and dropped.
    state = {k: v.half().contiguous() for k, v in legacy_state(model).items() if not k.startswith("lm_head")}
    for k, v in head.state_dict().items():
        state["cls." + k] = v.half().contiguous()
    state.pop("cls.predictions.decoder.bias", None)  # tied to cls.predictions.bias
    for f in dst.glob("*.safetensors"):
        f.unlink()
    save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "tokenizer.json").write_bytes(Path(tokenizer_path).read_bytes())
    write_json(
        dst / "preprocessor_config.json",
        {"image_mean": mean, "image_std": std, "size": {"height": model.config.image_size, "width": model.config.image_size}},
    )


# ---------------------------------------------------------------------------------------------
# 2. tiny BEiT + MLM head
# ---------------------------------------------------------------------------------------------
def tiny_beit_config(**config):
    """A tiny BEiT as both BEiT fixtures have it (32 wide, 2 heads, 64 px in 16 px patches, a
    mask token, no absolute position embeddings, layer scale 0.1); `config` sets the rest."""
    return BeitConfig(
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=64,
        patch_size=16,
        use_mask_token=True,
        use_absolute_position_embeddings=False,
        layer_scale_init_value=0.1,
        attn_implementation="eager",
        **config,
    )


def beit(tokenizer_path):
    cfg = tiny_beit_config(
        vocab_size=64,  # BEiT's own visual-token vocabulary (lm_head, unused by LexLIP)
        num_hidden_layers=2,
        use_relative_position_bias=True,
        use_shared_relative_position_bias=False,
        use_mean_pooling=False,
    )
    model = BeitForMaskedImageModeling(cfg).eval()
    randomize(model)
    head = mlm_head(32, 1000)
    mean, std = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
    paths = images([64, 64, 64, 96])
    px = torch.stack([pixels_of(p, mean, std) for p in paths[:3]])
    logits = beit_logits(model, head, px)
    mask = torch.ones(logits.shape[:2])
    p = pooled(logits, mask)
    cols = list(range(0, 12)) + [100, 101, 500, 999]
    singles = [pooled(beit_logits(model, head, px[i : i + 1]), torch.ones(1, logits.shape[1]))[0] for i in range(3)]

    # LexLIP at a larger size: the per-layer tables linearly interpolated (their interpolate_pos).
    cfg96 = copy.deepcopy(cfg)
    cfg96.image_size = 96
    m96 = BeitForMaskedImageModeling(cfg96).eval()
    sd = model.state_dict()
    for k in list(sd):
        if k.endswith("relative_position_bias_table"):
            sd[k] = lexlip_interpolate_table(sd[k], (6, 6))
    missing, unexpected = m96.load_state_dict(sd, strict=False)
    assert not unexpected and all("relative_position_index" in k for k in missing), (missing, unexpected)
    px96 = pixels_of(paths[3], mean, std).unsqueeze(0)
    logits96 = beit_logits(m96, head, px96)
    p96 = pooled(logits96, torch.ones(logits96.shape[:2]))[0]

    save_image_dir(
        OUT / "beit-tiny",
        model,
        head,
        tokenizer_path,
        {"lexlip_mlm_head": {"hidden_act": "gelu", "layer_norm_eps": 1e-12}},
        mean,
        std,
    )
    write_json(
        OUT / "beit.json",
        {
            "images": [p.name for p in paths[:3]],
            "pixels_first_values": [r(x.flatten()[:16].tolist()) for x in px],
            "pixels_sum": [float(x.double().sum()) for x in px],
            "logit_columns": cols,
            "logits": [[r(row[cols].tolist(), 6) for row in img] for img in logits],
            "pooled": [r(v.tolist()) for v in p],
            "single_vs_batch_max_diff": max((a - b).abs().max().item() for a, b in zip(singles, p)),
            "image_96": paths[3].name,
            "pooled_96": r(p96.tolist()),
        },
    )
    # A corrupt "image" (PNG signature then garbage) for the error test.
    (OUT / "images" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(200)))
    return model, head, paths


# ---------------------------------------------------------------------------------------------
# 3. tiny CLIP
# ---------------------------------------------------------------------------------------------
def clip_tokenizer():
    """A 1000-word word-level tokenizer in CLIP's manner: texts start with `<|startoftext|>` and
    end with `<|endoftext|>`, the largest id (CLIP and open_clip pool the text tower there)."""
    from tokenizers import models, normalizers, pre_tokenizers, processors

    words = ["<pad>", "a", "photo", "of", "dog", "cat", "on", "the", "grass", "red", "car"]
    words += [f"w{i}" for i in range(998 - len(words))] + ["<|startoftext|>", "<|endoftext|>"]
    vocab = {w: i for i, w in enumerate(words)}
    assert len(vocab) == 1000
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 998), ("<|endoftext|>", 999)],
    )
    return tk


def clip():
    tk = clip_tokenizer()
    # Both towers: 2 layers of width 32.
    tower = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        hidden_act="quick_gelu",
        layer_norm_eps=1e-5,
    )
    cfg = CLIPConfig(
        text_config=dict(
            tower,
            vocab_size=1000,
            max_position_embeddings=16,
            bos_token_id=998,
            eos_token_id=999,
            pad_token_id=0,
        ),
        vision_config=dict(tower, image_size=32, patch_size=8),
        projection_dim=16,
    )
    cfg._attn_implementation = "eager"
    model = CLIPModel(cfg).eval()
    randomize(model)
    dst = OUT / "clip-tiny"
    save_f16(model, tk, dst)
    mean = [0.48145466, 0.4578275, 0.40821073]
    std = [0.26862954, 0.26130258, 0.27577711]
    write_json(dst / "preprocessor_config.json", {"image_mean": mean, "image_std": std, "crop_size": {"height": 32, "width": 32}})
    texts = DUAL_TEXTS
    text_emb = []
    for t in texts:
        ids = torch.tensor([tk.encode(t).ids])
        f = model.get_text_features(input_ids=ids)
        f = getattr(f, "pooler_output", f)
        text_emb.append(F.normalize(f, dim=-1)[0])
    rng = np.random.default_rng(3)
    paths = []
    for i in range(2):
        arr = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
        p = OUT / "images" / f"clip{i}_32.png"
        Image.fromarray(arr, "RGB").save(p)
        paths.append(p)
    px = torch.stack([pixels_of(p, mean, std) for p in paths])
    f = model.get_image_features(pixel_values=px)
    f = getattr(f, "pooler_output", f)
    img_emb = F.normalize(f, dim=-1)
    write_embeddings(OUT / "clip.json", texts, [tk.encode(t).ids for t in texts], text_emb, paths, img_emb)


# ---------------------------------------------------------------------------------------------
# 4. a Lightning-style LexLIP checkpoint (tiny), and what it should produce
# ---------------------------------------------------------------------------------------------
def ckpt(tokenizer_path, image_paths):
    bcfg = tiny_beit_config(
        num_hidden_layers=1,
        use_relative_position_bias=False,
        use_shared_relative_position_bias=True,
        use_mean_pooling=True,
        vocab_size=16,
    )
    image = BeitForMaskedImageModeling(bcfg).eval()
    randomize(image)
    tcfg = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    text = BertForMaskedLM(tcfg).eval()
    randomize(text)
    text.tie_weights()
    # LexLIP: mlm_head_for_image = copy.deepcopy(text_transformer.cls); the BEiT here is 32 wide
    # while LexLIP's are both 768, so the copy is a separate 32-wide head.
    head = mlm_head(32, 1000)

    state = OrderedDict()
    for k, v in legacy_state(image).items():
        state["image_transformer." + k] = v
    for k, v in text.state_dict().items():
        state["text_transformer." + k] = v
    for k, v in head.state_dict().items():
        state["mlm_head_for_image." + k] = v
    # Stored as f16 to keep the fixture small (the weights are f16-exact); the extra buffer stays f32.
    state = OrderedDict((k, v.half() if v.is_floating_point() else v) for k, v in state.items())
    state["image_queue"] = torch.randn(4, 3)
    ck = {
        "epoch": 3,
        "global_step": 1234,
        "pytorch-lightning_version": "1.9.0",
        "state_dict": state,
        "hyper_parameters": {"config": {"image_size": 64, "max_text_len": 40, "tokenizer": "bert-base-uncased"}},
    }
    dst = OUT / "lexlip-tiny"
    dst.mkdir(parents=True, exist_ok=True)
    torch.save(ck, dst / "lexlip-tiny.ckpt", _use_new_zipfile_serialization=True)
    (dst / "tokenizer.json").write_bytes(Path(tokenizer_path).read_bytes())

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.enable_truncation(MAX_LENGTH)
    texts = ["a dog on the grass", "the man and the woman"]
    text_out = []
    for t in texts:
        ids = torch.tensor([tok.encode(t).ids])
        mask = torch.ones_like(ids)
        p = pooled(text(input_ids=ids, attention_mask=mask).logits, mask.float())[0]
        text_out.append({"text": t, "ids": ids[0].tolist(), "pooled": r(p.tolist())})
    px = pixels_of(image_paths[0], [0.5] * 3, [0.5] * 3).unsqueeze(0)
    lg = beit_logits(image, head, px)
    ip = pooled(lg, torch.ones(lg.shape[:2]))[0]
    write_json(dst / "expected.json", {"texts": text_out, "image": image_paths[0].name, "image_pooled": r(ip.tolist())})


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    splade_dir = splade()
    tok_path, _ = vocab1000(splade_dir)
    _, _, paths = beit(tok_path)
    clip()
    ckpt(tok_path, paths)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"fixtures written to {OUT} ({total / 1024:.0f} KiB)", file=sys.stderr)


if __name__ == "__main__":
    main()
