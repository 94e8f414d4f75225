"""What the PyTorch sides of the encoder benchmarks (scripts/bench_published_torch.py,
scripts/bench_encoders_torch.py) share with `lexlip bench encode`: its captions and how a
throughput is timed."""

import time


def captions(n):
    """The captions `lexlip bench encode` times (server/src/cli/bench_encode.rs), word for
    word: 8 to 20 words each."""
    words = ["a", "dog", "runs", "across", "the", "green", "grass", "while", "two", "children",
             "play", "with", "red", "ball", "near", "an", "old", "wooden", "fence", "under",
             "blue", "sky", "woman", "riding", "bicycle", "down", "busy", "city", "street", "at",
             "night", "kitchen"]
    return [" ".join(words[(i * 31 + j * 7) % len(words)] for j in range(8 + (i * 5) % 13))
            for i in range(n)]


def timed(fn, batch, seconds):
    """Items per second of `fn` (one batch of `batch` items a call): one unmeasured call, then
    calls until `seconds` and at least two have passed."""
    fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and runs >= 2:
            return batch * runs / elapsed
