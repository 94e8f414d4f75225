"""Tests of build_emoji_corpus.py and its colour words (emoji_colours.py) on small fixtures
(offline, stdlib; the image tests run where Pillow is importable, e.g. with
PYTHONPATH=target/data-cache/pillow-11.3.0).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import doctest
import json
import os
import sys
import tempfile
import unittest
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_emoji_corpus as b  # noqa: E402
import emoji_colours as c  # noqa: E402

try:
    import PIL  # noqa: F401

    HAVE_PIL = True
except ImportError:
    HAVE_PIL = False

EMOJIBASE = [
    {
        "label": "waving hand",
        "hexcode": "1F44B",
        "tags": ["hand", "wave"],
        "group": 1,
        "subgroup": 0,
        "skins": [
            {"label": "waving hand: dark skin tone", "hexcode": "1F44B-1F3FF", "group": 1,
             "subgroup": 0, "tone": 5},
        ],
    },
    {"label": "keycap: #", "hexcode": "0023-FE0F-20E3", "tags": [], "group": 0, "subgroup": 1},
    {"label": "flag: Germany", "hexcode": "1F1E9-1F1EA", "tags": ["DE", "flag"], "group": 0,
     "subgroup": 1},
    {"label": "", "hexcode": "1F1E6"},
]
MESSAGES = {
    "groups": [{"key": "people-body", "message": "people & body", "order": 1},
               {"key": "symbols", "message": "symbols", "order": 0}],
    "subgroups": [{"key": "hand-fingers-open", "message": "fingers open", "order": 0},
                  {"key": "keycap", "message": "keypad characters", "order": 1}],
    "skinTones": [],
}

SVG = """<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:cc="http://web.resource.org/cc/"
     xmlns:dc="http://purl.org/dc/elements/1.1/"
     xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
<metadata><rdf:RDF><cc:Work rdf:about="">
  <dc:title>Elephant Outline</dc:title>
  <dc:description>Clip art for coloring book creation</dc:description>
  <dc:subject><rdf:Bag><rdf:li>mammal</rdf:li><rdf:li>hash</rdf:li><rdf:li></rdf:li>
    <rdf:li>Matthew Loewen</rdf:li><rdf:li>0x93148a4</rdf:li><rdf:li>Mammal</rdf:li>
    <rdf:li>animal</rdf:li></rdf:Bag></dc:subject>
  <dc:creator><cc:Agent><dc:title>Matthew Loewen</dc:title></cc:Agent></dc:creator>
</cc:Work></rdf:RDF></metadata></svg>
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class EmojiTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        write(os.path.join(d, "data.json"), json.dumps(EMOJIBASE))
        write(os.path.join(d, "messages.json"), json.dumps(MESSAGES))
        self.info = b.load_emojibase(os.path.join(d, "data.json"), os.path.join(d, "messages.json"))

    def tearDown(self):
        self.tmp.cleanup()

    def test_hexcodes_join_with_and_without_fe0f(self):
        self.assertEqual(b.norm_hex("0023-fe0f-20e3"), "0023-20E3")
        self.assertEqual(b.norm_hex("0023-20E3"), b.norm_hex("0023-FE0F-20E3"))
        self.assertIn(b.norm_hex("0023-20e3"), self.info)

    def test_skin_tone_variants_share_the_base_concept_and_tags(self):
        skin = self.info["1F44B-1F3FF"]
        self.assertEqual(skin.concept, "1F44B")
        self.assertEqual(skin.tone, "dark skin tone")
        self.assertEqual(skin.tags, ["hand", "wave"])
        self.assertNotIn("1F1E6", self.info)  # no label: not usable

    def test_captions(self):
        self.assertEqual(
            b.emoji_captions(self.info["1F44B"], "waving hand sign"),
            ["waving hand", "hand, wave", "a people emoji: waving hand",
             "waving hand emoji (fingers open, people & body)", "waving hand sign"],
        )
        # The Unicode name is dropped where it repeats the label.
        self.assertEqual(
            b.emoji_captions(self.info["1F44B-1F3FF"], "waving hand"),
            ["waving hand: dark skin tone", "hand, wave, dark skin tone",
             "a people emoji: waving hand, dark skin tone",
             "waving hand, dark skin tone emoji (fingers open, people & body)"],
        )
        self.assertEqual(b.natural_label("flag: Germany"), "flag of Germany")
        self.assertEqual(b.natural_label("keycap: #"), "keycap #")

    def test_images_join_on_file_names_and_unlabelled_ones_are_counted(self):
        pkg = os.path.join(self.tmp.name, "pkg")
        for name in ("0023-20e3.png", "1f44b-1f3ff.png", "1f1e6.png"):
            write(os.path.join(pkg, "img", "google", "64", name), "")
        skipped = Counter()
        recs, srcs = b.emoji_records(pkg, "google", self.info, {}, skipped)
        self.assertEqual([r.image_id for r in recs], ["google/0023-20e3", "google/1f44b-1f3ff"])
        self.assertEqual([r.split_key for r in recs], ["emoji/0023-20E3", "emoji/1F44B"])
        self.assertEqual(srcs[0][1], "images/google/0023-20e3.png")
        self.assertEqual(skipped, Counter({"google: no emojibase label": 1}))


class ClipartTest(unittest.TestCase):
    def test_svg_metadata_and_caption_cleaning(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "e.svg")
            write(path, SVG)
            meta = b.read_svg_meta(path)
        self.assertEqual(meta.title, "Elephant Outline")
        self.assertEqual(meta.creator, "Matthew Loewen")
        self.assertEqual(b.clean_keywords(meta.keywords, meta.creator), ["mammal", "animal"])
        shared = b.Shared.count({"animals/mammals/elephant_outline_matthe_r": meta})
        self.assertEqual(
            b.clipart_captions("animals/mammals/elephant_outline_matthe_r", meta, shared),
            ["Elephant Outline", "mammal, animal",
             "clip art of elephant outline (animals, mammals)",
             "Clip art for coloring book creation"],
        )

    def test_collection_titles_give_way_to_the_file_name(self):
        meta = b.ClipartMeta(title="Part of the Flat Icon Collection", keywords=["icons"],
                             creator="Danny Allen")
        shared = b.Shared.count({f"computer/icons/x{i}": meta for i in range(5)})
        self.assertEqual(
            b.clipart_captions("computer/icons/folder_red_open_danny_01", meta, shared),
            ["folder red open", "clip art of folder red open (computer, icons)"],
        )
        self.assertEqual(b.strip_byline("Clipart by Nicu Buculei - piggybank"), "piggybank")

    def test_playing_cards_are_named_and_one_card_of_every_deck_is_one_family(self):
        self.assertEqual(b.card_name("simple_h_q"), "queen of hearts playing card")
        self.assertEqual(b.card_name("white_jk_b"), "black joker playing card")
        self.assertEqual(b.card_name("simple_x_2"), "")
        self.assertEqual(
            b.family_key("recreation/games/cards/simple/simple_h_q"),
            b.family_key("recreation/games/cards/white/white_h_q"),
        )
        self.assertEqual(b.family_key("shapes/jigsaw/jigsaw_red_10"), "shapes/jigsaw/jigsaw_red")
        self.assertEqual(b.family_key("shapes/jigsaw/jigsaw_red_9"), "shapes/jigsaw/jigsaw_red")

    def test_excluded_collections(self):
        self.assertTrue(b.clipart_excluded("special/patterns/p1", b.ClipartMeta()))
        self.assertTrue(b.clipart_excluded("shapes/stars/s1", b.ClipartMeta(title="gramastar")))
        self.assertFalse(b.clipart_excluded("animals/cat", b.ClipartMeta(title="cat")))


def record(image_id, source, key, captions):
    return b.Record(image_id, f"images/{image_id}.png", source, key, captions, {})


class SplitTest(unittest.TestCase):
    def test_split_is_deterministic_and_near_the_requested_fraction(self):
        keys = [f"emoji/{i:05X}" for i in range(20000)]
        picked = [k for k in keys if b.in_test(k, 10)]
        self.assertEqual(picked, [k for k in keys if b.in_test(k, 10)])
        self.assertGreater(len(picked), 1800)
        self.assertLess(len(picked), 2200)
        self.assertFalse(any(b.in_test(k, 0) for k in keys[:100]))

    def test_files_keep_concepts_whole_and_the_tsv_format(self):
        recs = []
        for i in range(200):
            for style in ("google", "twitter"):
                recs.append(record(f"{style}/{i:x}", style, f"emoji/{i:X}", [f"thing {i}", "x, y"]))
            recs.append(record(f"openclipart/c{i}", "openclipart", f"clipart/c{i}", [f"c {i}"]))
        with tempfile.TemporaryDirectory() as out:
            counts = b.write_splits(out, recs, 10, ["twitter"])

            def rows(name):
                with open(os.path.join(out, name), encoding="utf-8") as f:
                    lines = f.read().split("\n")
                self.assertEqual(lines[0], "title\tfilepath\timage_id")
                self.assertEqual(lines[-1], "")
                return [line.split("\t") for line in lines[1:-1]]

            by_id = {r.image_id: r for r in recs}
            train_keys = {by_id[i].split_key for _, _, i in rows("train.tsv")}
            test_keys = {by_id[i].split_key for _, _, i in rows("test.tsv")}
            self.assertTrue(test_keys)
            self.assertFalse(train_keys & test_keys)
            self.assertEqual(len(train_keys | test_keys), 400)
            # Every caption of an image is a row, filepath and id agree.
            for cap, path, image_id in rows("all.tsv"):
                self.assertIn(cap, by_id[image_id].captions)
                self.assertEqual(path, by_id[image_id].image)
            self.assertEqual(counts["all.tsv"], {"images": 600, "captions": 1000})
            # Both styles of a held-out concept are in test.
            google = {i.split("/")[1] for _, _, i in rows("test-google.tsv")}
            twitter = {i.split("/")[1] for _, _, i in rows("test-twitter.tsv")}
            self.assertEqual(google, twitter)
            # Style held out: all of its images in test, none in train, no test concept in train.
            held = {i for _, _, i in rows("test-holdout-twitter.tsv")}
            self.assertEqual(held, {r.image_id for r in recs if r.source == "twitter"})
            htrain = rows("train-holdout-twitter.tsv")
            self.assertFalse(any(i.startswith("twitter/") for _, _, i in htrain))
            self.assertFalse({by_id[i].split_key for _, _, i in htrain} & test_keys)
            with open(os.path.join(out, "images.jsonl"), encoding="utf-8") as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual(len(lines), 600)
            self.assertEqual(
                {x["image_id"] for x in lines if x["split"] == "test"},
                {i for _, _, i in rows("test.tsv")},
            )


@unittest.skipUnless(HAVE_PIL, "Pillow not importable")
class ImageTest(unittest.TestCase):
    def test_clip_art_is_cropped_composited_on_white_and_centred(self):
        from PIL import Image

        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "in.png")
            # A transparent 400×200 page with a red 100×50 box; transparent pixels hold black.
            im = Image.new("RGBA", (400, 200), (0, 0, 0, 0))
            im.paste((255, 0, 0, 255), (50, 20, 150, 70))
            im.save(src)
            dst = os.path.join(d, "out", "o.png")
            self.assertEqual(b.convert_image((src, dst, 64, True)), "")
            out = Image.open(dst)
            self.assertEqual((out.mode, out.size), ("RGB", (64, 64)))
            self.assertEqual(out.getpixel((0, 0)), (255, 255, 255))
            self.assertEqual(out.getpixel((32, 32)), (255, 0, 0))
            # The 2:1 box fills the width less the margins: 58×29, centred.
            self.assertEqual(out.getpixel((4, 32)), (255, 0, 0))
            self.assertEqual(out.getpixel((1, 32)), (255, 255, 255))  # the margin
            self.assertEqual(out.getpixel((32, 15)), (255, 255, 255))

            emoji = os.path.join(d, "e.png")
            Image.new("RGBA", (64, 64), (0, 0, 255, 128)).save(emoji)
            self.assertEqual(b.convert_image((emoji, dst, 64, False)), "blank")  # uniform
            blank = os.path.join(d, "b.png")
            Image.new("RGBA", (30, 30), (0, 0, 0, 0)).save(blank)
            self.assertEqual(b.convert_image((blank, dst + "2", 64, True)), "blank")
            bad = os.path.join(d, "bad.png")
            write(bad, "not a png")
            self.assertTrue(b.convert_image((bad, dst + "3", 64, True)).startswith("unreadable"))


# ---------------------------------------------------------------- colour words

WHITE, BLACK, GREY = (255, 255, 255), (10, 10, 10), (128, 128, 128)


class NamingTest(unittest.TestCase):
    def test_doc_examples(self):
        self.assertEqual(doctest.testmod(c).failed, 0)

    def test_hues_are_named_round_the_circle(self):
        for rgb, name in [((230, 20, 20), "red"), ((240, 20, 90), "red"), ((250, 140, 0), "orange"),
                          ((250, 220, 0), "yellow"), ((30, 180, 40), "green"),
                          ((20, 60, 230), "blue"), ((140, 30, 220), "purple"),
                          ((240, 60, 200), "pink")]:
            self.assertEqual(c.dominant_colour([rgb]), name, rgb)

    def test_the_white_page_does_not_count_and_grey_black_name_nothing(self):
        # A small red drawing on a large white page is red.
        self.assertEqual(c.dominant_colour([WHITE] * 90 + [(230, 20, 20)] * 10), "red")
        # Black, grey and washed-out pixels are drawn but of no hue.
        self.assertIsNone(c.dominant_colour([BLACK] * 5 + [GREY] * 5))
        self.assertIsNone(c.dominant_colour([(250, 230, 230)] * 4))
        self.assertIsNone(c.dominant_colour([WHITE] * 4))
        self.assertIsNone(c.dominant_colour([]))
        # Two hues, neither half of the drawing: no name; exactly half: named.
        mixed = [(230, 20, 20)] * 4 + [(20, 60, 230)] * 3 + [BLACK] * 3
        self.assertIsNone(c.dominant_colour(mixed))
        self.assertEqual(c.dominant_colour([(230, 20, 20)] * 5 + [BLACK] * 5), "red")

    def test_the_caption_puts_the_colour_before_the_first_caption_once(self):
        self.assertEqual(c.colour_caption("red", ["automobile", "car"]), "red automobile")
        self.assertIsNone(c.colour_caption("red", ["Red Heart", "love"]))
        self.assertIsNone(c.colour_caption(None, ["automobile"]))
        self.assertIsNone(c.colour_caption("red", []))
        # A skin tone is the picture's colour, and already named.
        self.assertIsNone(c.colour_caption("orange", ["open hands: medium-dark skin tone"]))
        # A word that contains the colour is not the colour word.
        self.assertEqual(c.colour_caption("red", ["reddish hat"]), "red reddish hat")


@unittest.skipUnless(HAVE_PIL, "Pillow not importable")
class PictureTest(unittest.TestCase):
    def test_mostly_one_colour_pictures_get_a_caption_and_the_rest_none(self):
        from PIL import Image

        with tempfile.TemporaryDirectory() as out:
            def picture(name, fill, box):
                im = Image.new("RGB", (64, 64), WHITE)
                im.paste(fill, box)
                os.makedirs(os.path.join(out, "images/google"), exist_ok=True)
                im.save(os.path.join(out, f"images/google/{name}.png"))
                return b.Record.png("google", name, f"emoji/{name}", [name, "x"], {})

            car = picture("automobile", (220, 30, 30), (8, 20, 56, 44))
            heart = picture("red heart", (220, 30, 30), (8, 8, 56, 56))
            ball = picture("8 ball", BLACK, (8, 8, 56, 56))
            records = [car, heart, ball]
            self.assertEqual(b.add_colour_words(records, out), 1)
            self.assertEqual(car.captions, ["automobile", "x", "red automobile"])
            self.assertEqual(heart.captions, ["red heart", "x"])
            self.assertEqual(ball.captions, ["8 ball", "x"])


if __name__ == "__main__":
    unittest.main()
