"""Priority hooks for `crawler crawl --priority MODULE:FUNCTION`: which URL a host takes next.

    PYTHONPATH=. .venv/bin/crawler crawl https://example.com/ \
        --priority examples.priority_hooks:shortest_path_first

Each is a function (url, depth, source) -> number, called once per URL when its host accepts
it, `source` being "seed", "link" or "sitemap". Within one host's queue a higher number is
fetched sooner and equal numbers keep their arrival order; politeness is never changed (one
request per host at a time, the delay, robots.txt). A function that raises, or returns no
number, gives that URL priority 0, and the crawl counts it as `priority_errors`.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def shortest_path_first(url: str, depth: int, source: str) -> int:
    """Pages near a site's root first: fewer path segments, then shorter URLs."""
    segments = [part for part in urlsplit(url).path.split("/") if part]
    return -(1000 * len(segments) + len(url))


def sitemap_first(url: str, depth: int, source: str) -> int:
    """URLs a host lists in its sitemaps before the links found on its pages, seeds first
    of all."""
    return {"seed": 2, "sitemap": 1}.get(source, 0)


def shallow_first(url: str, depth: int, source: str) -> int:
    """Breadth first within each host: fewer hops from a seed first."""
    return -depth
