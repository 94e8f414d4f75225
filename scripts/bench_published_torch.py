#!/usr/bin/env python3
"""The published photo models' reference code, timed: the PyTorch side of
`scripts/bench-published-vs-torch.sh` (which runs `lexlip bench encode` on the same models in the
same run and prints the ratios).

It builds random-weight models of the published shapes with the authors' own code (anew on every
run: the reference code re-reads its base models by Hub id when it loads a saved one) and saves
them the way the published checkpoints are saved, for lexlip to load:
  vdr/    VDR cross-modal (github.com/jzhoubu/vsearch): BERT-base text tower (128 positions,
          top-768 and own words), ViT-B/32 image tower at 224 px (top-768)
  blip/   BLIP's BlipForImageTextRetrieval (transformers), the shape of
          Salesforce/blip-itm-base-coco: ViT-B/16 at 384 px, BERT-base text encoder
  d2s/    D2S's head (github.com/thongnt99/lsr-multimodal) over 256-d embeddings, DistilBERT's
          vocabulary layer norm and projector
Then it times, on this machine's cores, texts/s and images/s at each batch size:
  vdr     encoder_q.embed(texts), encoder_p.embed(pixels)
  d2s     BLIP's ITC text / image embedding, then D2SModel (texts masked to their own words)
and prints one JSON object.

    VSEARCH=/tmp/vsearch LSR=/tmp/lsr-multimodal PYTHONPATH=<transformers 4.x> \\
      python scripts/bench_published_torch.py --out DIR --tokenizer tokenizer.json

`--tokenizer` is bert-base-uncased's word pieces (the tiny SPLADE test model's tokenizer.json
has them). Weights are random: the vectors mean nothing, the arithmetic is the real one.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch_bench import captions, timed

VSEARCH = Path(os.environ.get("VSEARCH", "/tmp/vsearch"))
LSR = Path(os.environ.get("LSR", "/tmp/lsr-multimodal"))
sys.path.insert(0, str(VSEARCH))
sys.path.insert(0, str(LSR))

torch.set_grad_enabled(False)


def bert_base_dir(tokenizer: Path, into: Path):
    from transformers import BertConfig, BertModel
    BertModel(BertConfig(), add_pooling_layer=False).save_pretrained(into)
    shutil.copy(tokenizer, into / "tokenizer.json")
    (into / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


def build_vdr(out: Path, tokenizer: Path, work: Path):
    from src.ir import Retriever, RetrieverConfig
    bert_base_dir(tokenizer, work / "bert")
    config = RetrieverConfig(
        encoder_q={"type": "vdr_crossmodal_text", "model_id": str(work / "bert"),
                   "max_len": 128, "shift_vocab_num": 999, "topk": 768, "pooling": "max"},
        encoder_p={"type": "vdr_crossmodal_image", "tokenizer_id": str(work / "bert"),
                   "max_len": 256, "topk": 768},
        max_len=512, shared_encoder=False,
    )
    model = Retriever(config).eval()
    # The reference starts its image projection at ones; random rows give real top-k work.
    model.encoder_p.proj.copy_(0.02 * torch.randn(model.encoder_p.proj.shape))
    model.config.encoder_q["model_id"] = "bert-base-uncased"
    model.config.encoder_p["tokenizer_id"] = "bert-base-uncased"
    model.save_pretrained(out)
    shutil.copy(tokenizer, out / "tokenizer.json")
    return model


def build_blip_d2s(root: Path, tokenizer: Path, work: Path):
    from tokenizers import Tokenizer
    from transformers import (BlipConfig, BlipForImageTextRetrieval, BertTokenizerFast,
                              DistilBertConfig, DistilBertForMaskedLM)
    from model import D2SConfig, D2SModel
    blip = BlipForImageTextRetrieval(BlipConfig()).eval()
    blip.save_pretrained(root / "blip")
    tok = Tokenizer.from_file(str(tokenizer))
    tok.add_special_tokens(["[DEC]", "[ENC]"])
    tok.save(str(root / "blip" / "tokenizer.json"))
    DistilBertForMaskedLM(DistilBertConfig()).save_pretrained(work / "distilbert")
    d2s = D2SModel(D2SConfig(mlm_head=str(work / "distilbert"), dense_size=256)).eval()
    d2s.config.mlm_head = "distilbert-base-uncased"
    d2s.save_pretrained(root / "d2s")
    shutil.copy(tokenizer, root / "d2s" / "tokenizer.json")
    blip_tok = BertTokenizerFast(tokenizer_file=str(root / "blip" / "tokenizer.json"))
    d2s_tok = BertTokenizerFast(tokenizer_file=str(tokenizer))
    return blip, blip_tok, d2s, d2s_tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--batch-sizes", default="1,32")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--models", default="vdr,d2s")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    wanted = args.models.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp())
    texts = captions(max(batches))
    rng = np.random.default_rng(0)
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "models": {}}

    if "vdr" in wanted:
        vdr = build_vdr(args.out / "vdr", args.tokenizer, work)
        pixels = torch.from_numpy(rng.standard_normal((max(batches), 3, 224, 224), np.float32))
        rows = {"text": [], "image": []}
        for b in batches:
            rows["text"].append([b, timed(lambda: vdr.encoder_q.embed(texts[:b]), b,
                                          args.seconds)])
            rows["image"].append([b, timed(lambda: vdr.encoder_p.embed(pixels[:b]), b,
                                           args.seconds)])
        report["models"]["vdr"] = rows
        print(json.dumps(rows), file=sys.stderr)
        del vdr

    if "d2s" in wanted:
        blip, blip_tok, d2s, d2s_tok = build_blip_d2s(args.out, args.tokenizer, work)
        pixels = torch.from_numpy(rng.standard_normal((max(batches), 3, 384, 384), np.float32))

        def text_side(batch):
            enc = blip_tok(batch, padding=True, truncation=True, max_length=35,
                           return_tensors="pt")
            states = blip.text_encoder(input_ids=enc.input_ids,
                                       attention_mask=enc.attention_mask).last_hidden_state
            dense = torch.nn.functional.normalize(blip.text_proj(states[:, 0, :]), dim=-1)
            words = d2s_tok(batch, add_special_tokens=False, padding=True, return_tensors="pt")
            return d2s(dense, words.input_ids, words.attention_mask)

        def image_side(px):
            states = blip.vision_model(pixel_values=px).last_hidden_state
            dense = torch.nn.functional.normalize(blip.vision_proj(states[:, 0, :]), dim=-1)
            return d2s(dense)

        rows = {"text": [], "image": []}
        for b in batches:
            rows["text"].append([b, timed(lambda: text_side(texts[:b]), b, args.seconds)])
            rows["image"].append([b, timed(lambda: image_side(pixels[:b]), b, args.seconds)])
        report["models"]["d2s"] = rows
        print(json.dumps(rows), file=sys.stderr)
    shutil.rmtree(work)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
