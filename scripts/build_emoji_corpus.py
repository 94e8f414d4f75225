#!/usr/bin/env python3
"""Builds the emoji + clip-art image-text corpus from unpacked registry packages.

Called by scripts/build-emoji-corpus.sh, which fetches and unpacks the pinned packages; see
docs/data.md. The metadata parts (joins, captions, splits) are stdlib only so that their tests
run anywhere; Pillow is imported only where images are converted.

Every image is composited on white, converted to RGB and saved as PNG: lexlip's image encoder
drops alpha (`to_rgb8`), so a transparent background would otherwise turn into whatever colour
the transparent pixels happen to hold. Clip art is cropped to its drawing, scaled (aspect kept)
to fit a square and centred on white, so that the encoder's centre crop never cuts it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import emoji_colours

EMOJI_STYLES = ("google", "twitter")
CLIPART = "openclipart"
STYLES = EMOJI_STYLES + (CLIPART,)

# A noun per emojibase group, for the caption "a smiley emoji: grinning face".
GROUP_NOUN = {
    "smileys-emotion": "smiley",
    "people-body": "people",
    "component": "component",
    "animals-nature": "animal and nature",
    "food-drink": "food and drink",
    "travel-places": "travel and places",
    "activities": "activity",
    "objects": "object",
    "symbols": "symbol",
    "flags": "flag",
}

# Clip art left out: computer-generated variations whose captions cannot tell them apart
# (1,375 "gramastar" star polygons) and abstract fills (gradients, patterns).
CLIPART_EXCLUDED_TITLES = {"gramastar"}
CLIPART_EXCLUDED_DIRS = ("special/gradients/", "special/patterns/")
# A clip-art title, description or keyword list shared by more files than this names a
# collection, not the picture (e.g. "Part of the Flat Icon Collection", "card"; "action,
# computer, icons, theme"): the title gives way to the file name, the others are left out.
GENERIC_SHARED_BY = 3
# Keywords that carry nothing ("hash" tags every icon of two icon themes).
JUNK_KEYWORDS = {"", "hash", "none", "untitled"}
MAX_DESCRIPTION = 160
# An image whose every channel spans at most this many levels is taken for blank; a pixel
# closer than this to white is page margin.
BLANK_RANGE = 8
# Clip art keeps this fraction of the side free on each edge (emoji have a similar margin).
MARGIN = 0.05
# Larger clip-art pages (some are 16,000 px wide) are box-reduced below this side first.
MAX_WORKING_SIDE = 2048

NS = {
    "dc": "http://purl.org/dc/elements/1.1/",
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "cc": "http://web.resource.org/cc/",
}


# ---------------------------------------------------------------- text helpers


def clean(text: str | None) -> str:
    """One line, single spaces: a caption must hold no tab or newline (TSV)."""
    return " ".join((text or "").split())


def norm_key(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", text.lower()).strip()


def dedupe(captions: list[str]) -> list[str]:
    """Drops empty captions and repeats (compared without case and punctuation), keeps order."""
    seen, out = set(), []
    for c in captions:
        c = clean(c)
        k = norm_key(c)
        if c and k and k not in seen:
            seen.add(k)
            out.append(c)
    return out


def in_test(key: str, percent: float) -> bool:
    """Deterministic split: sha256 of the key, per-mille bucket below percent·10."""
    bucket = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % 1000
    return bucket < round(percent * 10)


# ---------------------------------------------------------------- emoji


def norm_hex(hexcode: str) -> str:
    """Upper case, '-' separated, without the variation selector FE0F (emojibase writes
    fully-qualified sequences, emoji-datasource's file names sometimes omit FE0F)."""
    parts = [p for p in re.split(r"[-_ ]", hexcode.strip().upper()) if p and p != "FE0F"]
    return "-".join(parts)


@dataclass
class EmojiInfo:
    hexcode: str  # as emojibase writes it
    label: str
    tags: list[str]
    group_key: str
    group: str
    subgroup: str
    concept: str  # normalised hexcode of the base emoji (skin-tone variants share it)
    tone: str = ""  # "light skin tone" for a variant


def load_emojibase(data_path: str, messages_path: str) -> dict[str, EmojiInfo]:
    """Normalised hexcode → info, for every base emoji and every skin-tone variant."""
    with open(data_path, encoding="utf-8") as f:
        data = json.load(f)
    with open(messages_path, encoding="utf-8") as f:
        messages = json.load(f)
    groups = {g["order"]: (g["key"], g["message"]) for g in messages["groups"]}
    subgroups = {s["order"]: s["message"] for s in messages["subgroups"]}
    out: dict[str, EmojiInfo] = {}
    for e in data:
        label = clean(e.get("label"))
        if not label:
            continue
        gkey, gmsg = groups.get(e.get("group"), ("", ""))
        base = EmojiInfo(
            hexcode=e["hexcode"],
            label=label,
            tags=[clean(t) for t in e.get("tags", []) if clean(t)],
            group_key=gkey,
            group=gmsg,
            subgroup=subgroups.get(e.get("subgroup"), ""),
            concept=norm_hex(e["hexcode"]),
        )
        out.setdefault(base.concept, base)
        for s in e.get("skins", []):
            slabel = clean(s.get("label"))
            if not slabel:
                continue
            tone = slabel[len(label) + 2 :] if slabel.startswith(label + ": ") else ""
            out.setdefault(
                norm_hex(s["hexcode"]),
                EmojiInfo(
                    hexcode=s["hexcode"],
                    label=slabel,
                    tags=base.tags,
                    group_key=gkey,
                    group=gmsg,
                    subgroup=base.subgroup,
                    concept=base.concept,
                    tone=tone,
                ),
            )
    return out


def load_unicode_names(emoji_json: str) -> dict[str, str]:
    """Normalised hexcode → Unicode character name (lower case) from emoji-datasource."""
    with open(emoji_json, encoding="utf-8") as f:
        data = json.load(f)
    return {norm_hex(e["unified"]): clean(e["name"]).lower() for e in data if e.get("name")}


def natural_label(label: str) -> str:
    """CLDR labels use "flag: Germany", "keycap: 1", "waving hand: light skin tone"."""
    for prefix, repl in (("flag: ", "flag of "), ("keycap: ", "keycap ")):
        if label.startswith(prefix):
            label = repl + label[len(prefix) :]
    return label.replace(": ", ", ")


def emoji_captions(info: EmojiInfo, unicode_name: str = "") -> list[str]:
    nat = natural_label(info.label)
    caps = [info.label]
    tags = list(info.tags) + ([info.tone] if info.tone else [])
    if tags:
        caps.append(", ".join(tags))
    noun = GROUP_NOUN.get(info.group_key)
    if noun:
        caps.append(f"{'an' if noun[0] in 'aeiou' else 'a'} {noun} emoji: {nat}")
    where = ", ".join(x for x in (info.subgroup, info.group) if x)
    if where:
        caps.append(f"{nat} emoji ({where})")
    if unicode_name and not info.tone:
        caps.append(unicode_name)
    return dedupe(caps)


# ---------------------------------------------------------------- clip art


@dataclass
class ClipartMeta:
    title: str = ""
    keywords: list[str] = field(default_factory=list)
    description: str = ""
    creator: str = ""


def read_svg_meta(path: str) -> ClipartMeta:
    """dc:title, dc:subject keywords, dc:description and dc:creator of the SVG's cc:Work (the
    Open Clip Art Library's RDF block); an SVG <title> stands in for a missing dc:title."""
    root = ET.parse(path).getroot()
    meta = ClipartMeta()
    work = root.find(".//cc:Work", NS)
    if work is not None:
        meta.title = clean(work.findtext("dc:title", "", NS))
        meta.keywords = [clean(li.text) for li in work.findall("dc:subject/rdf:Bag/rdf:li", NS)]
        meta.description = clean(work.findtext("dc:description", "", NS))
        meta.creator = clean(work.findtext("dc:creator/cc:Agent/dc:title", "", NS))
    if not meta.title:
        meta.title = clean(root.findtext("{http://www.w3.org/2000/svg}title", ""))
    return meta


def strip_byline(title: str) -> str:
    """"Clipart by Nicu Buculei - piggybank" → "piggybank"."""
    return re.sub(r"^clip ?art by [^-]+ - ", "", title, flags=re.I)


def words(text: str) -> list[str]:
    """File-name-ish text → words: separators and camelCase split, underscores dropped."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[\s_\-.]+", text) if w]


def name_tokens(creator: str) -> list[str]:
    return [t for t in norm_key(creator).split() if len(t) >= 3]


def is_author_token(token: str, creator_tokens: list[str]) -> bool:
    """File names often carry a (truncated) author name: "elephant_outline_matthe_r"."""
    t = token.lower()
    return len(t) >= 3 and any(c.startswith(t) for c in creator_tokens)


def filename_phrase(stem: str, creator: str) -> str:
    ctoks = name_tokens(creator)
    kept = [
        w
        for w in words(stem)
        if not w.isdigit() and len(w) > 1 and not is_author_token(w, ctoks)
    ]
    return " ".join(kept).lower()


def clean_title(title: str) -> str:
    return clean(" ".join(words(strip_byline(title)))) if "_" in title else clean(strip_byline(title))


def clean_keywords(keywords: list[str], creator: str) -> list[str]:
    creator_key = norm_key(creator)
    ctoks = set(name_tokens(creator))
    out, seen = [], set()
    for k in keywords:
        k = clean(k.replace("_", " "))
        key = norm_key(k)
        if (
            key in JUNK_KEYWORDS
            or re.fullmatch(r"0x[0-9a-f]+", key)
            or key == creator_key
            or key in ctoks
            or key in seen
        ):
            continue
        seen.add(key)
        out.append(k)
    return out


def family_key(rel: str) -> str:
    """Near-duplicates (numbered variants) share a family and so a split:
    directory + file stem without trailing numbers and separators; a playing card, its name
    (the same card of the four decks is one family, as the styles of one emoji concept)."""
    d, _, stem = rel.rpartition("/")
    if card_name(stem):
        return f"cards/{card_name(stem)}"
    base = re.sub(r"[0-9_\-\s]+$", "", stem.lower()) or stem.lower()
    return f"{d}/{base}"


def clipart_excluded(rel: str, meta: ClipartMeta) -> bool:
    return rel.startswith(CLIPART_EXCLUDED_DIRS) or meta.title.lower() in CLIPART_EXCLUDED_TITLES


@dataclass
class Shared:
    """How many clip-art files share each title, description and keyword list: shared by more
    than GENERIC_SHARED_BY, it names a collection rather than the picture."""

    titles: Counter
    descriptions: Counter
    keywords: Counter

    @classmethod
    def count(cls, metas: dict[str, ClipartMeta]) -> "Shared":
        ms = metas.values()
        return cls(
            Counter(norm_key(clean_title(m.title)) for m in ms),
            Counter(norm_key(m.description) for m in ms),
            Counter(norm_key(", ".join(clean_keywords(m.keywords, m.creator))) for m in ms),
        )

    @staticmethod
    def generic(counter: Counter, text: str) -> bool:
        return counter[norm_key(text)] > GENERIC_SHARED_BY


CARD_SUITS = {"c": "clubs", "d": "diamonds", "h": "hearts", "s": "spades"}
CARD_RANKS = {"a": "ace", "j": "jack", "q": "queen", "k": "king"}
CARD_RANKS.update({str(n): w for n, w in zip(range(2, 11), "two three four five six seven eight nine ten".split())})


def card_name(stem: str) -> str:
    """The four playing-card decks name their files DECK_SUIT_RANK ("simple_h_q"), titled
    only "card": "queen of hearts playing card"."""
    m = re.fullmatch(r"(bordered|ornamental|simple|white)_(?:([cdhs])_(a|[2-9]|10|j|q|k)|jk_([br]))", stem)
    if not m:
        return ""
    if m.group(4):
        return f"{'black' if m.group(4) == 'b' else 'red'} joker playing card"
    return f"{CARD_RANKS[m.group(3)]} of {CARD_SUITS[m.group(2)]} playing card"


def clipart_captions(rel: str, meta: ClipartMeta, shared: Shared) -> list[str]:
    stem = rel.rpartition("/")[2]
    title = clean_title(meta.title)
    if Shared.generic(shared.titles, title):
        title = ""
    # File names add little beside a real title and often carry the author's name.
    name = card_name(stem) or title or filename_phrase(stem, meta.creator)
    caps = [name]
    kws = ", ".join(clean_keywords(meta.keywords, meta.creator))
    if kws and not Shared.generic(shared.keywords, kws):
        caps.append(kws)
    category = ", ".join(w.replace("_", " ") for w in rel.split("/")[:-1])
    if name:
        caps.append(f"clip art of {name.lower()}" + (f" ({category})" if category else ""))
    d = meta.description
    if (
        d
        and len(d) <= MAX_DESCRIPTION
        and len(d.split()) >= 3
        and "http" not in d.lower()
        and not Shared.generic(shared.descriptions, d)
    ):
        caps.append(d)
    return dedupe(caps)


# ---------------------------------------------------------------- images


def convert_image(job: tuple[str, str, int, bool]) -> str:
    """src → dst (RGB PNG on white). Clip art (`fit`) is cropped to its drawing (page margins
    of white or transparent pixels removed), scaled to fit size×size less a MARGIN on each side
    and centred. Returns "" on success, else the reason the image is unusable."""
    src, dst, size, fit = job
    from PIL import Image, ImageChops  # only the image stage needs Pillow

    Image.MAX_IMAGE_PIXELS = None  # a few clip-art PNGs are 16,000 px wide, and trusted
    try:
        with Image.open(src) as im:
            im = im.convert("RGBA")
    except Exception as e:  # noqa: BLE001 - any decoder failure makes the image unusable
        return f"unreadable: {type(e).__name__}: {e}"
    if fit and max(im.size) > MAX_WORKING_SIDE:
        # Box-reduce huge pages first, premultiplied so that colour under transparent pixels
        # does not bleed in.
        factor = -(-max(im.size) // MAX_WORKING_SIDE)
        im = im.convert("RGBa").reduce(factor).convert("RGBA")
    white = (255, 255, 255)
    rgb = Image.alpha_composite(Image.new("RGBA", im.size, white + (255,)), im).convert("RGB")
    if fit:
        ink = ImageChops.difference(rgb, Image.new("RGB", rgb.size, white)).convert("L")
        box = ink.point(lambda v: 255 if v > BLANK_RANGE else 0).getbbox()
        if box is None:
            return "blank"
        rgb = rgb.crop(box)
        inner = size - 2 * round(size * MARGIN)
        w, h = rgb.size
        scale = inner / max(w, h)
        nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
        rgb = rgb.resize((nw, nh), Image.Resampling.LANCZOS, reducing_gap=3.0)
        canvas = Image.new("RGB", (size, size), white)
        canvas.paste(rgb, ((size - nw) // 2, (size - nh) // 2))
        rgb = canvas
    if all(hi - lo <= BLANK_RANGE for lo, hi in rgb.getextrema()):
        return "blank"
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    rgb.save(tmp, format="PNG", optimize=False, compress_level=6)
    os.replace(tmp, dst)
    return ""


def convert_all(jobs: list[tuple[str, str, int, bool]], workers: int) -> list[str]:
    """Converts images whose output is missing; results in job order (deterministic)."""
    todo = [i for i, j in enumerate(jobs) if not os.path.exists(j[1])]
    results = [""] * len(jobs)
    if not todo:
        return results
    print(f"converting {len(todo)} images ({len(jobs) - len(todo)} already done)", file=sys.stderr)
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            it = pool.map(convert_image, [jobs[i] for i in todo], chunksize=32)
            for n, (i, r) in enumerate(zip(todo, it), 1):
                results[i] = r
                if n % 1000 == 0:
                    print(f"  {n}/{len(todo)}", file=sys.stderr)
    else:
        for i in todo:
            results[i] = convert_image(jobs[i])
    return results


# ---------------------------------------------------------------- corpus


@dataclass
class Record:
    image_id: str
    image: str  # path relative to the output directory
    source: str  # google | twitter | openclipart
    split_key: str  # emoji: the concept; clip art: the family
    captions: list[str]
    extra: dict

    @classmethod
    def png(cls, source: str, name: str, split_key: str, captions: list[str],
            extra: dict) -> "Record":
        """The record of picture `name` of `source`, copied to images/SOURCE/NAME.png."""
        return cls(
            image_id=f"{source}/{name}",
            image=f"images/{source}/{name}.png",
            source=source,
            split_key=split_key,
            captions=captions,
            extra=extra,
        )


def emoji_records(pkg: str, style: str, info: dict[str, EmojiInfo], names: dict[str, str],
                  skipped: Counter, joined: Counter | None = None
                  ) -> tuple[list[Record], list[tuple[str, str]]]:
    """One record per emoji PNG whose hexcode (file name) has an emojibase label; `joined`
    counts how each joined."""
    joined = Counter() if joined is None else joined
    img_dir = os.path.join(pkg, "img", style, "64")
    records, sources = [], []
    for fname in sorted(os.listdir(img_dir)):
        if not fname.endswith(".png"):
            continue
        stem = fname[:-4].lower()
        key = norm_hex(stem)
        e = info.get(key)
        if e is None:
            skipped[f"{style}: no emojibase label"] += 1
            continue
        exact = stem.upper() == e.hexcode.upper()
        joined[f"{style}: {'same hexcode' if exact else 'same hexcode without FE0F'}"] += 1
        caps = emoji_captions(e, names.get(key, ""))
        extra = {
            "hexcode": e.hexcode,
            "concept": e.concept,
            "label": e.label,
            "tags": e.tags,
            "group": e.group,
            "subgroup": e.subgroup,
            "skin_tone": e.tone,
        }
        record = Record.png(style, stem, f"emoji/{e.concept}", caps, extra)
        records.append(record)
        sources.append((os.path.join(img_dir, fname), record.image))
    return records, sources


def clipart_records(png_root: str, svg_root: str, skipped: Counter
                    ) -> tuple[list[Record], list[tuple[str, str]]]:
    """One record per distinct clip-art PNG: symbolic links and byte-identical copies are
    counted once (the first in path order)."""
    rels = []
    for dirpath, dirnames, files in os.walk(png_root):
        dirnames.sort()
        for f in files:
            p = os.path.join(dirpath, f)
            if f.endswith(".png"):
                if os.path.islink(p):
                    skipped["openclipart: symbolic link (same picture elsewhere)"] += 1
                else:
                    rels.append(os.path.relpath(p, png_root)[: -len(".png")])
    rels.sort()
    metas: dict[str, ClipartMeta] = {}
    for rel in rels:
        svg = os.path.join(svg_root, rel + ".svg")
        try:
            metas[rel] = read_svg_meta(svg)
        except (OSError, ET.ParseError):
            skipped["openclipart: no readable SVG metadata (file name only)"] += 1
            metas[rel] = ClipartMeta()
    kept = {r: m for r, m in metas.items() if not clipart_excluded(r, m)}
    skipped["openclipart: excluded collection (star variations, gradients, patterns)"] += len(
        metas
    ) - len(kept)
    shared = Shared.count(kept)
    records, sources, digests = [], [], set()
    for rel, meta in kept.items():
        src = os.path.join(png_root, rel + ".png")
        with open(src, "rb") as f:
            digest = hashlib.sha256(f.read()).digest()
        if digest in digests:
            skipped["openclipart: byte-identical copy"] += 1
            continue
        digests.add(digest)
        caps = clipart_captions(rel, meta, shared)
        if not caps:
            skipped["openclipart: no caption"] += 1
            continue
        extra = {
            "title": meta.title,
            "keywords": meta.keywords,
            "creator": meta.creator,
            "description": meta.description,
        }
        record = Record.png(CLIPART, rel, f"clipart/{family_key(rel)}", caps, extra)
        records.append(record)
        sources.append((src, record.image))
    return records, sources


def tsv_rows(records: list[Record]) -> list[str]:
    rows = ["title\tfilepath\timage_id"]
    for r in records:
        for c in r.captions:
            assert "\t" not in c and "\n" not in c
            rows.append(f"{c}\t{r.image}\t{r.image_id}")
    return rows


def write_lines(path: str, lines: list[str]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)


def write_splits(out: str, records: list[Record], percent: float,
                 holdout_styles: list[str]) -> dict:
    test_keys = {r.split_key for r in records if in_test(r.split_key, percent)}
    train = [r for r in records if r.split_key not in test_keys]
    test = [r for r in records if r.split_key in test_keys]
    files = {"all.tsv": records, "train.tsv": train, "test.tsv": test}
    for style in STYLES:
        files[f"test-{style}.tsv"] = [r for r in test if r.source == style]
    for style in holdout_styles:
        # Train: the other styles, without the held-out concepts (test.tsv stays clean).
        # Test: every image of the style; -unseen: only the concepts of test.tsv too.
        files[f"train-holdout-{style}.tsv"] = [r for r in train if r.source != style]
        files[f"test-holdout-{style}.tsv"] = [r for r in records if r.source == style]
        files[f"test-holdout-{style}-unseen.tsv"] = [r for r in test if r.source == style]
    for name in os.listdir(out):  # hold-out files of an earlier build with other options
        if name.endswith(".tsv") and name.startswith(("train", "test")) and name not in files:
            os.remove(os.path.join(out, name))
    counts = {}
    for name, recs in files.items():
        rows = tsv_rows(recs)
        write_lines(os.path.join(out, name), rows)
        counts[name] = {"images": len(recs), "captions": len(rows) - 1}
    split_of = {r.image_id: ("test" if r.split_key in test_keys else "train") for r in records}
    write_lines(
        os.path.join(out, "images.jsonl"),
        [
            json.dumps(
                {
                    "image_id": r.image_id,
                    "image": r.image,
                    "source": r.source,
                    "split": split_of[r.image_id],
                    "split_key": r.split_key,
                    "captions": r.captions,
                    **r.extra,
                },
                ensure_ascii=False,
                sort_keys=True,
            )
            for r in records
        ],
    )
    keys = Counter(r.split_key.split("/")[0] for r in records)
    tkeys = Counter(k.split("/")[0] for k in test_keys)
    counts["split_keys"] = {
        k: {"total": len({r.split_key for r in records if r.split_key.startswith(k + "/")}),
            "test": tkeys[k]}
        for k in sorted(keys)
    }
    return counts


def add_colour_words(records: list[Record], out: str) -> int:
    """Adds the caption "COLOUR first-caption" to each picture that is mostly one colour (see
    emoji_colours); returns how many got one."""
    added = 0
    for n, r in enumerate(records, 1):
        colour = emoji_colours.picture_colour(os.path.join(out, r.image))
        caption = emoji_colours.colour_caption(colour, r.captions)
        if caption is not None:
            r.captions.append(caption)
            added += 1
        if n % 5000 == 0:
            print(f"  colour words: {n}/{len(records)} pictures read", file=sys.stderr)
    return added


def build(args: argparse.Namespace) -> dict:
    out = args.out
    os.makedirs(out, exist_ok=True)
    params = json.dumps({"clipart_size": args.clipart_size, "format": 2}, sort_keys=True)
    stamp = os.path.join(out, ".image-params")
    if not os.path.exists(stamp) or open(stamp, encoding="utf-8").read() != params:
        import shutil

        shutil.rmtree(os.path.join(out, "images"), ignore_errors=True)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(params)

    skipped: Counter = Counter()
    joined: Counter = Counter()
    eb = os.path.join(args.emojibase, "en")
    info = load_emojibase(os.path.join(eb, "data.json"), os.path.join(eb, "messages.json"))
    records: list[Record] = []
    jobs: list[tuple[str, str, int, bool]] = []
    for style, pkg in (("google", args.google), ("twitter", args.twitter)):
        names = load_unicode_names(os.path.join(pkg, "emoji.json"))
        recs, srcs = emoji_records(pkg, style, info, names, skipped, joined)
        records += recs
        jobs += [(s, os.path.join(out, d), 64, False) for s, d in srcs]
    recs, srcs = clipart_records(args.clipart_png, args.clipart_svg, skipped)
    records += recs
    jobs += [(s, os.path.join(out, d), args.clipart_size, True) for s, d in srcs]

    results = convert_all(jobs, args.workers)
    usable = []
    for rec, reason in zip(records, results):
        if reason:
            skipped[f"{rec.source}: {reason.split(':')[0]} image"] += 1
            print(f"skipped {rec.image_id}: {reason}", file=sys.stderr)
        else:
            usable.append(rec)
    # Remove images from an earlier build that this one no longer lists.
    wanted = {os.path.normpath(os.path.join(out, r.image)) for r in usable}
    for dirpath, _, files in os.walk(os.path.join(out, "images")):
        for f in files:
            p = os.path.normpath(os.path.join(dirpath, f))
            if p not in wanted:
                os.remove(p)

    coloured = add_colour_words(usable, out) if args.colour_words else None
    split_counts = write_splits(out, usable, args.test_percent, args.holdout_style)
    per_source = Counter(r.source for r in usable)
    caps = Counter(r.source for r in usable for _ in r.captions)
    summary = {
        "images": {s: per_source[s] for s in STYLES},
        "captions": {s: caps[s] for s in STYLES},
        "captions_per_image": {
            s: round(caps[s] / per_source[s], 2) if per_source[s] else 0 for s in STYLES
        },
        "skipped": dict(sorted(skipped.items())),
        "emojibase_entries": len(info),
        "emoji_join": dict(sorted(joined.items())),
        "test_percent": args.test_percent,
        "clipart_size": args.clipart_size,
        "colour_words": coloured,
        "files": split_counts,
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
        f.write("\n")
    return summary


def print_summary(s: dict) -> None:
    print("images per source:")
    for k, v in s["images"].items():
        print(f"  {k:12} {v:6} images, {s['captions'][k]:6} captions "
              f"({s['captions_per_image'][k]} per image)")
    print("emoji images joined to emojibase labels:")
    for k, v in s["emoji_join"].items():
        print(f"  {v:6}  {k}")
    print("skipped:")
    for k, v in s["skipped"].items():
        print(f"  {v:6}  {k}")
    print("split keys (emoji concepts, clip-art families): "
          + ", ".join(f"{k} {v['test']}/{v['total']} in test"
                      for k, v in s["files"]["split_keys"].items()))
    print("files:")
    for k, v in s["files"].items():
        if k.endswith(".tsv"):
            print(f"  {k:34} {v['images']:6} images {v['captions']:7} captions")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--google", required=True, help="unpacked emoji-datasource-google")
    p.add_argument("--twitter", required=True, help="unpacked emoji-datasource-twitter")
    p.add_argument("--emojibase", required=True, help="unpacked emojibase-data")
    p.add_argument("--clipart-png", required=True, help="…/usr/share/openclipart/png")
    p.add_argument("--clipart-svg", required=True, help="…/usr/share/openclipart/svg")
    p.add_argument("--out", required=True)
    p.add_argument("--clipart-size", type=int, default=64)
    p.add_argument("--test-percent", type=float, default=10.0)
    p.add_argument("--holdout-style", action="append", default=[], choices=STYLES)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--colour-words", action="store_true",
                   help="add a caption naming the colour of each picture that is mostly one "
                        "saturated hue (\"red automobile\")")
    args = p.parse_args(argv)
    if not 0 < args.test_percent < 100:
        p.error("--test-percent must be between 0 and 100")
    if args.clipart_size < 8:
        p.error("--clipart-size must be at least 8")
    args.holdout_style = sorted(set(args.holdout_style))
    print_summary(build(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
