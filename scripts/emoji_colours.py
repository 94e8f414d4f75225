"""Colour words from the pixels: a caption "red automobile" for a picture that is mostly red.

The labels of emoji and the titles of clip art rarely name the colour ("automobile", not "red
car"), so a model trained on them never learns that a red picture is red, and a user's "a red
car" ranks every red thing above the car. `build_emoji_corpus.py --colour-words` adds one caption,
COLOUR + the picture's first caption, to each picture whose drawn pixels are at least half one
saturated hue, and none where the colour word is already in that caption or it names a skin tone.

The naming is stdlib only (its tests run anywhere); reading a picture needs Pillow.
"""

from __future__ import annotations

import colorsys
from collections import Counter
from collections.abc import Iterable

# Hue bins in degrees: (upper bound, name); red wraps round past the last bound.
HUES = ((15, "red"), (40, "orange"), (68, "yellow"), (160, "green"), (250, "blue"),
        (290, "purple"), (340, "pink"))
# A pixel this light and this grey is the white page, not the drawing.
WHITE_VALUE, WHITE_SATURATION = 0.94, 0.08
# Below these a drawn pixel is grey, black or brownish: drawn, but of no named hue.
MIN_SATURATION, MIN_VALUE = 0.35, 0.3
# The share of the drawn pixels one hue needs to name the picture.
DOMINANT_SHARE = 0.5
# Pictures are read at this side (a 64 px emoji or clip art, 1,024 pixels counted).
SAMPLE_SIDE = 32


def hue_name(degrees: float) -> str:
    for upper, name in HUES:
        if degrees < upper:
            return name
    return "red"


def dominant_colour(pixels: Iterable[tuple[int, int, int]]) -> str | None:
    """The colour word of RGB pixels (0-255) on white, or None when no saturated hue covers
    DOMINANT_SHARE of the drawn (non-white) pixels.

    >>> dominant_colour([(230, 20, 20)] * 3 + [(255, 255, 255)] * 9 + [(20, 20, 20)])
    'red'
    >>> dominant_colour([(230, 20, 20)] + [(20, 20, 20)] * 2) is None
    True
    """
    counts: Counter[str] = Counter()
    drawn = 0
    for r, g, b in pixels:
        h, s, v = colorsys.rgb_to_hsv(r / 255, g / 255, b / 255)
        if v > WHITE_VALUE and s < WHITE_SATURATION:
            continue
        drawn += 1
        if s >= MIN_SATURATION and v >= MIN_VALUE:
            counts[hue_name(h * 360)] += 1
    if not counts:
        return None
    name, n = counts.most_common(1)[0]
    return name if n >= DOMINANT_SHARE * drawn else None


def picture_colour(path: str) -> str | None:
    """The colour word of the picture at `path` (see `dominant_colour`)."""
    from PIL import Image  # only reading pictures needs Pillow

    with Image.open(path) as im:
        small = im.convert("RGB").resize((SAMPLE_SIDE, SAMPLE_SIDE), Image.Resampling.BICUBIC)
        return dominant_colour(small.getdata())


def colour_caption(colour: str | None, captions: list[str]) -> str | None:
    """The caption to add: the colour word before the first caption, unless there is no colour,
    no caption, the first caption already says it, or it names a skin tone (the hue found is
    then the skin's, mostly "orange", and the tone is already named)."""
    if colour is None or not captions:
        return None
    first = captions[0].lower()
    if colour in first.split() or "skin tone" in first:
        return None
    return f"{colour} {captions[0]}"
