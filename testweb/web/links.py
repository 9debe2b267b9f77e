"""How a page spells a URL: the many hrefs (relative, root, absolute, mixed case, reordered
or tracked queries, fragments) that each resolve to one canonical target, and the canonical
spelling itself."""

from __future__ import annotations

import random
from typing import Protocol
from urllib.parse import urlsplit

from testweb.web.model import Link


def canonical_query_order(path_and_query: str) -> str:
    """The spelling a page is filed under: its query parameters sorted by name, then value.

    Like real servers, the web answers a query's parameters in any order; its links write
    them in both orders, and a crawler may request either.
    """
    path, mark, query = path_and_query.partition("?")
    if not mark or "&" not in query:
        return path_and_query
    params = sorted(query.split("&"), key=lambda param: param.partition("=")[::2])
    return f"{path}?{'&'.join(params)}"


def split_url(url: str) -> tuple[str, str]:
    """`http://h:p/a?b` -> (`h`, `/a?b`)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    return (parts.hostname or "").lower(), path + (f"?{parts.query}" if parts.query else "")


class _Origins(Protocol):
    """What a link writer asks of the web: where a host is served."""

    def origin(self, host: str) -> str: ...

    def url(self, host: str, path_and_query: str = "/") -> str: ...


class _LinkWriter:
    _TRACKING = ("utm_source=newsletter", "utm_medium=email", "utm_campaign=spring")
    _FRAGMENTS = ("top", "section-2", "comments", "more")

    def __init__(self, web: _Origins, host: str, path: str, base_href: str | None,
                 rng: random.Random) -> None:
        self.web = web
        self.host = host
        self.base_path = split_url(base_href)[1].split("?")[0] if base_href \
            else path.split("?")[0]
        self.rng = rng

    def to(self, host: str, path: str, text: str, *, area: str = "main", rel: str = "",
           style: str | None = None, fragment: str | None = None) -> Link:
        rng = self.rng
        target = self.web.url(host, path)
        path_only, _, query = path.partition("?")
        params = query.split("&") if query else []
        if len(params) > 1 and rng.random() < 0.7:
            params = params[::-1]  # unsorted: the crawler sorts them by key
        if rng.random() < 0.12:
            params.insert(rng.randrange(len(params) + 1), rng.choice(self._TRACKING))
        if style is None:
            roll = rng.random()
            if host != self.host:
                style = "absolute" if roll < 0.75 else "mixed-case"
            else:
                style = ("root" if roll < 0.36 else "relative" if roll < 0.72
                         else "absolute" if roll < 0.9 else "mixed-case")
        if fragment is None and rng.random() < 0.15:
            fragment = rng.choice(self._FRAGMENTS)
        if style == "relative":
            written = _relative_path(path_only, self.base_path)
        elif style == "root":
            written = path_only
        else:
            origin = self.web.origin(host)
            if style == "mixed-case":
                origin = origin.replace("http://", "HTTP://").replace(host, host.upper())
            written = origin + ("" if path_only == "/" and not params and rng.random() < 0.3
                                else path_only)
        href = written + ("?" + "&".join(params) if params else "") + \
            (f"#{fragment}" if fragment else "")
        return Link(href=href, target=target, text=text, area=area, rel=rel)


def _relative_path(target: str, base_path: str) -> str:
    """A path relative to the directory of base_path that resolves back to target."""
    base_dirs = base_path.split("/")[1:-1]
    target_parts = target.split("/")[1:]
    common = 0
    while (common < len(base_dirs) and common < len(target_parts) - 1
           and base_dirs[common] == target_parts[common]):
        common += 1
    relative = "../" * (len(base_dirs) - common) + "/".join(target_parts[common:])
    return relative or "./"
