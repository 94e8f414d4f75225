#!/usr/bin/env python3
"""The summary table of an ablation (scripts/ablate-dense.sh, ablate-seed-methods.sh,
ablate-rerank.sh): one markdown row per arm, in the order given, from OUT/ARM/eval.json and
OUT/ARM/train.json; written to OUT/summary.md and printed.

    python3 scripts/ablation_summary.py {dense,seed-methods,rerank} OUT ARM...
"""

import json
import sys
from pathlib import Path

RECALL = "R@1 / R@5 / R@10"


def recall(settings: dict, direction: str) -> str:
    """R@1 / R@5 / R@10 of `direction` (t2i, i2t, ...) in percent."""
    return " / ".join(f"{100 * settings[f'{direction}.r@{k}']:.1f}" for k in (1, 5, 10))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def dense(out: Path, arms: list[str]) -> tuple[list[str], list[str]]:
    """Recall in the four directions (empty where the evaluation has none), training time."""
    header = ["arm"] + [f"{d} {RECALL}" for d in ("T2I", "I2T", "I2I", "T2T")] + ["training s", "pairs/s"]
    rows = []
    for arm in arms:
        s = load(out / arm / "eval.json")["settings"][0]

        def r(d):
            return recall(s, d) if f"{d}.r@1" in s else ""

        t = load(out / arm / "train.json")["summary"]
        rows.append(f"| {arm} | {r('t2i')} | {r('i2t')} | {r('i2i')} | {r('t2t')} | "
                    f"{t['seconds']:.0f} | {t['samples_per_s']:.1f} |")
    return header, rows


def seed_methods(out: Path, arms: list[str]) -> tuple[list[str], list[str]]:
    """Recall in the four directions, image lexicon size, training time ("-" for an arm that
    did not train)."""
    header = (["arm"] + [f"{d} {RECALL}" for d in ("T2I", "I2T", "I2I", "T2T")]
              + ["nnz image", "training s", "pairs/s"])
    rows = []
    for arm in arms:
        e = load(out / arm / "eval.json")["settings"][0]
        pct = lambda d: recall(e, d)
        t = out / arm / "train.json"
        s = load(t)["summary"] if t.exists() else {}
        secs = f"{s['seconds']:.0f}" if s else "-"
        rate = f"{s['samples_per_s']:.1f}" if s else "-"
        rows.append(f"| {arm} | {pct('t2i')} | {pct('i2t')} | {pct('i2i')} | {pct('t2t')} | "
                    f"{e['nnz_per_image']:.0f} | {secs} | {rate} |")
    return header, rows


def rerank(out: Path, arms: list[str]) -> tuple[list[str], list[str]]:
    """The first stage alone (from the first arm's evaluation), then each re-ranker: recall,
    time per query, training time."""
    header = ["arm", f"T2I {RECALL}", f"I2T {RECALL}", "ms per query (T2I / I2T)", "training s", "pairs/s"]
    rows = []
    for arm in arms:
        ev = load(out / arm / "eval.json")["settings"][0]
        tr = load(out / arm / "train.json")["summary"]
        if not rows:
            rows.append(f"| lexicon (first stage) | {recall(ev, 't2i')} | {recall(ev, 'i2t')} | | | |")
        rows.append(
            f"| {arm} (top {ev['rerank.top']}) | {recall(ev, 'rerank.t2i')} | {recall(ev, 'rerank.i2t')} | "
            f"{ev['rerank.t2i.ms_per_query']:.1f} / {ev['rerank.i2t.ms_per_query']:.1f} | "
            f"{tr['seconds']:.0f} | {tr['samples_per_s']:.1f} |")
    return header, rows


TABLES = {"dense": dense, "seed-methods": seed_methods, "rerank": rerank}


def main(argv: list[str]) -> None:
    kind, out, arms = argv[0], Path(argv[1]), argv[2:]
    header, rows = TABLES[kind](out, arms)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + rows
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
