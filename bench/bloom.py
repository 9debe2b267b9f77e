"""The seen-set's costs, before and after a change of pipeline/core/bloom.py, side by side.

`--before REF` (default `main`) is the module as git holds it at REF, loaded beside the working
tree's. For the scheduler's default filter (capacity 20,000 at p = 10^-4: HostPolicy) at 1,000
and 20,000 items, each measured in CPU time (process_time, so other work on a shared machine
does not count) as the best of --rounds rounds, the two versions interleaved:
  - add: adding the items to an empty filter, per item;
  - lookup: looking up as many absent items (a seen-check of a new URL), per item;
  - bytes: to_bytes + from_bytes (what an offer costs on top of its URLs), and the stored size.

    .venv/bin/python -m bench.bloom [--before main] [--rounds 15]
    .venv/bin/python -m bench.bloom --sizes   # stored bytes as a seen-set grows (~1 minute)

`--sizes` adds random URL hashes (add_many) to seen-sets whose first slice is sized as a host
budget of 100, HostPolicy's default and the global budget size it, and prints the bytes each
stores (to_bytes) at 0 to 10^7 URLs, with its slices (docs/scale.md, "The seen-set as it
grows").

Figures go to docs/benchmarks.md ("The seen-set's compression").
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from pipeline.core import bloom as after

ROOT = Path(__file__).resolve().parent.parent
CAPACITY = 20_000
FP_RATE = 1e-4
FILLS = (1_000, 20_000)


def load_before(ref: str) -> ModuleType:
    """pipeline/core/bloom.py as git holds it at `ref`, as a module of its own."""
    source = subprocess.run(["git", "show", f"{ref}:pipeline/core/bloom.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader(f"bloom_at_{ref}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"{ref}:pipeline/core/bloom.py", "exec"), module.__dict__)
    return module


def cpu_us(action: Callable[[], object], per: int = 1) -> float:
    started = time.process_time()
    action()
    return (time.process_time() - started) / per * 1e6


def measure(module: ModuleType, items: list[int], absent: list[int]) -> dict[str, float]:
    bloom = module.BloomFilter(CAPACITY, FP_RATE)
    add = cpu_us(lambda: [bloom.add(item) for item in items], len(items))
    lookup = cpu_us(lambda: [item in bloom for item in absent], len(absent))
    data = bloom.to_bytes()
    trip = cpu_us(lambda: [module.BloomFilter.from_bytes(bloom.to_bytes()) for _ in range(20)],
                  20)
    return {"add": add, "lookup": lookup, "bytes": trip, "stored": len(data)}


SIZE_STEPS = (0, 1_000, 20_000, 100_000, 1_000_000, 4_000_000, 10_000_000)
FIRST_SLICES = (400, 20_000, 1_000_000)


def sizes() -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    print("| URLs offered | " + " | ".join(f"first slice {c:,}" for c in FIRST_SLICES) + " |")
    print("|---:|" + "---:|" * len(FIRST_SLICES))
    columns = []
    for capacity in FIRST_SLICES:
        bloom = after.BloomFilter(capacity, FP_RATE)
        done, column = 0, []
        for target in SIZE_STEPS:
            if target > done:
                bloom.add_many(rng.integers(-(2**63), 2**63 - 1, size=target - done,
                                            dtype=np.int64))
                done = target
            mark = ", at the ceiling" if bloom.saturated else ""
            column.append(f"{len(bloom.to_bytes()):,} B ({len(bloom.slices)}{mark})")
        columns.append(column)
    for row, target in enumerate(SIZE_STEPS):
        print(f"| {target:,} | " + " | ".join(column[row] for column in columns) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bloom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="main", help="git ref of the code to compare "
                        "against (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=15,
                        help="rounds, best taken (default: %(default)s)")
    parser.add_argument("--sizes", action="store_true",
                        help="print the stored bytes of growing seen-sets instead")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes()
        return 0
    before = load_before(args.before)
    commit = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.strip()
    rng = random.Random(20261206)
    versions = {f"before ({args.before}, {commit})": before, "after (working tree)": after}
    print(f"capacity {CAPACITY:,} at p = {FP_RATE}; CPU time, best of {args.rounds} rounds")
    print("| items | code | add, us/item | lookup of an absent item, us | to_bytes + from_bytes, "
          "us | stored bytes |")
    print("|---:|---|---:|---:|---:|---:|")
    for fill in FILLS:
        items = [rng.getrandbits(64) - 2**63 for _ in range(fill)]
        absent = [rng.getrandbits(64) - 2**63 for _ in range(max(fill, 5_000))]
        best: dict[str, dict[str, float]] = {name: {} for name in versions}
        for _ in range(args.rounds):
            for name, module in versions.items():
                for figure, value in measure(module, items, absent).items():
                    best[name][figure] = min(best[name].get(figure, value), value)
        for name, figures in best.items():
            print(f"| {fill:,} | {name} | {figures['add']:.2f} | {figures['lookup']:.2f} | "
                  f"{figures['bytes']:.0f} | {figures['stored']:,.0f} |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
