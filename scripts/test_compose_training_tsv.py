"""compose_training_tsv.py on a hand-made shard: rows, paths and extracted images (stdlib only)."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compose_training_tsv.py")


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


class ComposeTrainingTsv(unittest.TestCase):
    def test_rows_of_the_with_tsv_come_first_then_one_per_picture(self):
        with tempfile.TemporaryDirectory() as tmp:
            shards = os.path.join(tmp, "shards")
            os.makedirs(shards)
            with tarfile.open(os.path.join(shards, "00000.tar"), "w") as tar:
                for key, caption in [("000000001", "pizza and\n rocket"), ("000000000", "2 × red heart")]:
                    add(tar, key + ".jpg", b"jpeg " + key.encode())
                    add(tar, key + ".txt", caption.encode())
                    add(tar, key + ".json", b"{}")
            corpus = os.path.join(tmp, "corpus")
            os.makedirs(corpus)
            with open(os.path.join(corpus, "train.tsv"), "w", encoding="utf-8") as f:
                f.write("title\tfilepath\timage_id\ndog face\timages/dog.png\tgoogle/dog\n")
            out = os.path.join(tmp, "out")
            subprocess.run([sys.executable, SCRIPT, "--shards", shards, "--out", out,
                            "--with", os.path.join(corpus, "train.tsv")], check=True,
                           capture_output=True)
            with open(os.path.join(out, "train.tsv"), encoding="utf-8") as f:
                rows = [line.rstrip("\n").split("\t") for line in f]
            images = os.path.join(out, "images")
            self.assertEqual(rows, [
                ["title", "filepath", "image_id"],
                ["dog face", os.path.join(corpus, "images/dog.png"), "google/dog"],
                ["2 × red heart", os.path.join(images, "000000000.jpg"), "compose/000000000"],
                ["pizza and rocket", os.path.join(images, "000000001.jpg"), "compose/000000001"],
            ])
            with open(os.path.join(images, "000000001.jpg"), "rb") as f:
                self.assertEqual(f.read(), b"jpeg 000000001")
            self.assertEqual(sorted(os.listdir(images)), ["000000000.jpg", "000000001.jpg"])

    def test_no_shards_is_an_error_that_says_what_to_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = subprocess.run([sys.executable, SCRIPT, "--shards", tmp, "--out", tmp],
                                 capture_output=True, text=True)
            self.assertNotEqual(run.returncode, 0)
            self.assertIn("lexlip bench compose", run.stderr)


if __name__ == "__main__":
    unittest.main()
