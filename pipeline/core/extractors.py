"""The main-text extractors a crawl can choose (`--extractor`), what each one scores and costs,
and the rule that makes one of them the default.

This module owns the catalogue and the rule only: the extractors themselves are in parse.py,
which this module does not import, so the options and their help stay cheap to load. The
figures are measured, not chosen: `python -m bench.quality --extractors` prints them (docs/
extraction.md has the last run and the command), and a test re-scores the F1 column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ExtractorFigures:
    """One extractor as the options show it.

    f1: mean token F1 of parse_page's text against the hand-made article text of the Article
        Extraction Benchmark (the 179 of its 181 real pages that do not say noindex).
    cpu_ms: CPU milliseconds per page of the whole parse_page on those pages (decode, the
        parse for links, the text), one core.
    """

    name: str
    summary: str
    f1: float
    cpu_ms: float


# From one run of `python -m bench.quality --extractors` (docs/extraction.md).
EXTRACTOR_FIGURES: tuple[ExtractorFigures, ...] = (
    ExtractorFigures("trafilatura", "with its fallback extractors", 0.965, 28.9),
    ExtractorFigures("trafilatura-fast", "no fallback extractors", 0.961, 21.1),
    ExtractorFigures("resiliparse", "main content; links parsed by lexbor", 0.930, 5.0),
)

# How much F1 the default may give up for a cheaper extractor: about one article's worth of
# text in 200, well under what separates two extractors of different kinds.
F1_TOLERANCE = 0.005

DEFAULT_RULE = (f"the default is the cheapest extractor within {F1_TOLERANCE} F1 of the best "
                "on the real-pages benchmark")


def default_extractor(figures: Sequence[ExtractorFigures] = EXTRACTOR_FIGURES,
                      tolerance: float = F1_TOLERANCE) -> str:
    """The cheapest extractor (CPU per page) whose F1 is within `tolerance` of the best; a tie
    in cost goes to the better F1, then to the earlier one in `figures`."""
    if not figures:
        raise ValueError("no extractors to choose a default from")
    best = max(figure.f1 for figure in figures)
    # Figures are rounded to 3 decimals: compare in thousandths, so 0.965 - 0.960 counts as
    # within 0.005 although the floats differ by a hair more.
    eligible = [figure for figure in figures
                if round((best - figure.f1) * 1000) <= round(tolerance * 1000)]
    return min(eligible, key=lambda figure: (figure.cpu_ms, -figure.f1)).name


EXTRACTORS: tuple[str, ...] = tuple(figure.name for figure in EXTRACTOR_FIGURES)
DEFAULT_EXTRACTOR = default_extractor()


def extractor_help() -> str:
    """The `--extractor` help: each choice with its F1 and CPU per page, and the rule."""
    choices = "; ".join(f"{f.name} ({f.summary}): F1 {f.f1:.3f}, {f.cpu_ms:.1f} ms CPU/page"
                        for f in EXTRACTOR_FIGURES)
    return (f"main-text extractor: {choices} (real-pages benchmark, docs/extraction.md); "
            f"{DEFAULT_RULE}")
