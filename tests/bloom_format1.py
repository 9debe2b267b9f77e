"""Seen-sets stored in format 1 (one Bloom filter, plain double hashing), as the release before
format 2 wrote them, kept in tests/data/ so that tests/test_bloom.py can check they are still
read and answer for every item they were given.

Each file was written by pipeline/core/bloom.py as git holds it at FORMAT1_COMMIT:

    .venv/bin/python -m tests.bloom_format1   # writes tests/data/bloom_format1_*.bin
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
FORMAT1_COMMIT = "8b562e6"  # the last commit whose bloom.py writes format 1

# name: (capacity, fp rate, items added, seed of the items)
FIXTURES: dict[str, tuple[int, float, int, int]] = {
    "sparse": (20_000, 1e-4, 1_000, 1),  # the scheduler's default seen-set: zstd-compressed
    "full": (2_000, 0.01, 2_000, 2),  # at its capacity: stored raw
    "overfull": (500, 0.01, 1_500, 3),  # past its capacity, as a host offered too many URLs
}


def items(name: str) -> list[int]:
    """The URL hashes the fixture `name` was given, in order."""
    _, _, count, seed = FIXTURES[name]
    rng = random.Random(seed)
    return [rng.getrandbits(64) - 2**63 for _ in range(count)]


def path(name: str) -> Path:
    return DATA / f"bloom_format1_{name}.bin"


def main() -> None:
    source = subprocess.run(["git", "show", f"{FORMAT1_COMMIT}:pipeline/core/bloom.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader("bloom_format1", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "bloom_format1", "exec"), module.__dict__)
    DATA.mkdir(exist_ok=True)
    for name, (capacity, fp_rate, _, _) in FIXTURES.items():
        bloom = module.BloomFilter(capacity, fp_rate)
        for item in items(name):
            bloom.add(item)
        path(name).write_bytes(bloom.to_bytes())
        print(f"{path(name).relative_to(ROOT)}: {bloom!r}")


if __name__ == "__main__":
    main()
