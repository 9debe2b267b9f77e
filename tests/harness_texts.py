"""Texts of a small vocabulary and their edited copies: the near-duplicate tests' documents."""

from __future__ import annotations

import random

WORDS = ["tide", "harbour", "master", "noon", "tuesday", "boat", "crew", "storm", "lamp",
         "keeper", "winter", "sea", "gull", "rope", "anchor", "pier", "sail", "mast", "deck",
         "cargo", "port", "light", "wave", "fog", "bell", "chart", "compass"]


def text(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def edit(original: str, rate: float, seed: int) -> str:
    """Substitute about `rate` of the words."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + "x" if rng.random() < rate else w
                    for w in original.split())
