#!/usr/bin/env python3
"""Golden outputs of the Hugging Face `transformers` BLIP retrieval model (`BlipForImageTextRetrieval`,
the layout of `Salesforce/blip-itm-base-coco`) for lexlip-model's BLIP test (model/tests/parity_blip.rs).

Run once, in the virtualenv of scripts/make_fixtures.py (CI never runs it; it has no torch; the
fixtures were written with torch 2.15, transformers 5.25, tokenizers 0.23):

    /tmp/venv-ref/bin/python scripts/make_blip_fixtures.py

What is compared is BLIP's image-text contrastive (ITC) embeddings, `forward(..., use_itm_head=False)`:
the vision tower's post-layer-normed class token through `vision_proj`, the text tower's `[CLS]` state
(self-attention only: no image, so the cross-attention weights go unused) through `text_proj`, each
L2-normalised.

It writes, under model/tests/fixtures/:
  blip-tiny/      a random tiny BlipForImageTextRetrieval as `save_pretrained` writes it (safetensors,
                  weights rounded to f16 and stored as f16, cross-attention and ITM head included),
                  the 1000-word-piece vocabulary of vocab1000/ plus BLIP's two added tokens `[DEC]`
                  (1000, the text config's bos_token_id) and `[ENC]` (1001), as BLIP's tokenizer adds
                  them to BERT's 30522, and the PIL image processor's preprocessor_config.json;
  blip-tiny-bin/  the same weights as PyTorch's `pytorch_model.bin` (f16), the tokenizer, and a
                  config.json that keeps only the keys differing from transformers' defaults (so that
                  the defaults are what the loader fills in);
  blip.json       texts with the reference tokenizer's ids (cut to 35 tokens, LAVIS's max_txt_len) and
                  unit text embeddings; 32 x 32 pixel tensors of three fixture images as BLIP's PIL
                  image processor makes them (squashed, bicubic, OpenAI CLIP mean/std) and their unit
                  image embeddings. The model is tested on these pixels, the resampler separately.
"""

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import BertTokenizerFast, BlipConfig, BlipForImageTextRetrieval
from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import OUT, r, randomize, write_json  # noqa: E402

MAX_TXT_LEN = 35  # LAVIS's BLIP retrieval models: max_txt_len
SIZE = 32
# Only what differs from transformers' BlipTextConfig / BlipVisionConfig / BlipConfig defaults.
TEXT = {"vocab_size": 1002, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "max_position_embeddings": 64, "bos_token_id": 1000}
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "image_size": SIZE, "patch_size": 8}
TOP = {"image_text_hidden_size": 16}


def tokenizer():
    tk = Tokenizer.from_file(str(OUT / "vocab1000" / "tokenizer.json"))
    assert tk.get_vocab_size() == 1000
    tk.add_special_tokens(["[DEC]", "[ENC]"])
    assert tk.token_to_id("[DEC]") == 1000 and tk.token_to_id("[ENC]") == 1001
    assert tk.token_to_id("[PAD]") == 0 and tk.token_to_id("[SEP]") == 102 and tk.token_to_id("[CLS]") == 101
    return tk


def main():
    torch.manual_seed(11)
    tk = tokenizer()
    cfg = BlipConfig(text_config=TEXT, vision_config=VISION, **TOP)
    cfg._attn_implementation = "eager"
    model = BlipForImageTextRetrieval(cfg).eval()
    randomize(model)
    assert model.text_encoder.config.is_decoder, "the checkpoint should carry the (unused) cross-attention"

    dst = OUT / "blip-tiny"
    dst.mkdir(parents=True, exist_ok=True)
    model.half()
    model.save_pretrained(dst, safe_serialization=True)
    model.float()
    tk.save(str(dst / "tokenizer.json"))
    proc = BlipImageProcessorPil(size={"height": SIZE, "width": SIZE})
    proc.save_pretrained(dst)

    # The same tensors, under the same names, as a pytorch_model.bin repository.
    bin_dir = OUT / "blip-tiny-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    state = load_file(str(dst / "model.safetensors"))
    assert all(t.dtype == torch.float16 for t in state.values())
    torch.save(state, bin_dir / "pytorch_model.bin")
    tk.save(str(bin_dir / "tokenizer.json"))
    minimal = {"architectures": ["BlipForImageTextRetrieval"], "model_type": "blip", **TOP,
               "text_config": TEXT, "vision_config": VISION}
    write_json(bin_dir / "config.json", minimal)
    again = BlipConfig.from_pretrained(bin_dir)
    for sub in ("text_config", "vision_config"):
        a, b = getattr(again, sub).to_dict(), getattr(cfg, sub).to_dict()
        assert all(a[k] == b[k] for k in b if k not in ("_name_or_path", "transformers_version")), sub

    ref_tok = BertTokenizerFast(tokenizer_object=Tokenizer.from_file(str(dst / "tokenizer.json")))
    texts = [
        "a man and his family in the city at night",
        "Two people ride bicycles down a busy city street at night.",
        "kitchen",
        "The first people who came back to the house after the war were two men from the north, and "
        "their family had been there for years; later the city built a school and a station near it.",
        "Ünïcödé, punctuation!? and numbers 12345",
    ]
    batch = ref_tok(texts, truncation=True, max_length=MAX_TXT_LEN, padding=True, return_tensors="pt")
    ids = [[int(i) for i, m in zip(row, mask) if m] for row, mask in zip(batch.input_ids, batch.attention_mask)]
    assert max(len(row) for row in ids) == MAX_TXT_LEN, "one text should be cut"
    assert all(row[0] == 101 and row[-1] == 102 for row in ids)

    names = ["img0_64.png", "img1_64.png", "img3_96.png"]
    images = [Image.open(OUT / "images" / n).convert("RGB") for n in names]
    pixels = proc(images=images, return_tensors="pt").pixel_values
    assert pixels.shape == (len(names), 3, SIZE, SIZE)
    # Rounded as blip.json stores them, before the reference reads them.
    pixels = torch.tensor([r(p.flatten().tolist(), 6) for p in pixels]).reshape(pixels.shape)

    with torch.no_grad():
        hidden = model.text_encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        text_emb = F.normalize(model.text_proj(hidden.last_hidden_state[:, 0, :]), dim=-1)
        vision = model.vision_model(pixel_values=pixels).last_hidden_state
        image_emb = F.normalize(model.vision_proj(vision[:, 0, :]), dim=-1)
        # The model's own ITC path computes the same similarities.
        n = len(names)
        itc = model(input_ids=batch.input_ids[:n], attention_mask=batch.attention_mask[:n],
                    pixel_values=pixels, use_itm_head=False).itm_score
        assert torch.allclose(itc, image_emb @ text_emb[:n].t(), atol=1e-6)

    write_json(
        OUT / "blip.json",
        {
            "max_length": MAX_TXT_LEN,
            "texts": texts,
            "text_ids": ids,
            "text_embeddings": [r(v.tolist()) for v in text_emb],
            "images": names,
            "image_size": SIZE,
            "pixels": [r(p.flatten().tolist(), 6) for p in pixels],
            "image_embeddings": [r(v.tolist()) for v in image_emb],
        },
    )
    print(f"written {dst}, {bin_dir} and {OUT / 'blip.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
