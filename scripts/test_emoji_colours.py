"""Tests of emoji_colours.py and `build_emoji_corpus.py --colour-words` (stdlib; the picture
test runs where Pillow is importable).

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import doctest
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_emoji_corpus as b  # noqa: E402
import emoji_colours as c  # noqa: E402

try:
    import PIL  # noqa: F401

    HAVE_PIL = True
except ImportError:
    HAVE_PIL = False

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
