"""The answer to each request: status, headers and body of a page, a resource, a redirect or
an error, the nth time it is asked for, and the content a page's body carries."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace

from testweb.web.bodies import (
    _error_html,
    _html_response,
    _layout,
    _main_html,
    _pdf_bytes,
    _png_bytes,
    _text_response,
)
from testweb.web.faults import _NEVER_RECOVERS, RECOVERING_FAILURES, _without_session_ids
from testweb.web.hosts import WebBase
from testweb.web.model import Response, _Page
from testweb.web.prose import _ADJECTIVES, _NATIVE_SENTENCES, _NOUNS, _VERBS, _rng
from testweb.web.spec import FaultHost, HostProfile, HostRole, PageFault

# Retry-After (delta-seconds) of a regular page that answers 429 or 503 once, then 200.
RETRY_AFTER_429 = 2
RETRY_AFTER_503 = 1


class Answers(WebBase):
    """What the server sends for a request, and what a page's body says."""

    def render(self, host: str, path_and_query: str, nth_request: int, *,
               host_nth: int | None = None, now: float | None = None) -> Response:
        """The answer to the nth_request-th request (1-based) for this host and path.

        host_nth: which page request (robots.txt not counted) this is for the host, 1-based;
        only the recovering host looks at it (None: nth_request). now: the request's arrival
        (epoch seconds), from which an HTTP-date Retry-After is computed (None: the clock).
        """
        profile = self._profiles.get(host)
        if profile is None:
            return _text_response(421, f"{host} is not served here\n")
        if profile.role is HostRole.SITEMAPS:
            return self._sitemap_answer(host, path_and_query)
        delay = self.spec.slow_seconds if profile.role is HostRole.SLOW else 0.0
        response = self._answer(host, profile, path_and_query, nth_request,
                                nth_request if host_nth is None else host_nth, now)
        if delay:
            response = replace(response, delay_before=response.delay_before + delay)
        return response

    def final_response(self, url: str) -> Response:
        """The answer a crawler keeps for `url` (after a 429 or 503, the 200 that follows; for
        a page that never recovers, its failing answer)."""
        host, path = self.split_url(url)
        failures = self.failures_before_success(url)
        nth = 1 if failures >= _NEVER_RECOVERS else failures + 1
        return self.render(host, path, nth, host_nth=nth, now=0.0)

    def body(self, url: str) -> bytes:
        """The bytes the server sends for `url` (content-encoded, if it says so)."""
        return self.final_response(url).body

    def decoded_body(self, url: str, limit: int | None = None) -> bytes:
        """The entity body once Content-Encoding is undone; its first `limit` bytes if given
        (a gzip bomb decodes to WebSpec.bomb_bytes)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is not None and page.fault is PageFault.GZIP_BOMB:
            html = self._html(host, path)
            size = self.spec.bomb_bytes if limit is None else min(limit, self.spec.bomb_bytes)
            return (html + b" " * max(0, size - len(html)))[:size]
        body = self.body(url)
        return body if limit is None else body[:limit]

    def decoded_size(self, url: str) -> int:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is not None and page.fault is PageFault.GZIP_BOMB:
            return self.spec.bomb_bytes
        return len(self.body(url))

    def key_phrase(self, url: str) -> str:
        """A sentence unique to the page at `url` (copies share their original's)."""
        host, path = self.split_url(url)
        owner = self._content_owner(host, path)
        digest = hashlib.sha256(f"{self.spec.seed}|{host}|{owner}".encode()).hexdigest()
        rng = random.Random(digest)
        return (
            f"Field note {digest[:10]} records that the {rng.choice(_ADJECTIVES)} "
            f"{rng.choice(_NOUNS)} {rng.choice(_VERBS)} near the {rng.choice(_NOUNS)}."
        )

    def native_phrase(self, url: str) -> str | None:
        """The non-ASCII sentence in the page's own charset (None for non-HTML answers)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        if page is None or page.media_type != "text/html" or page.status != 200:
            return None
        owner = page.prose_of or self._content_owner(host, path)
        return _rng(self.spec.seed, host, owner, "native").choice(_NATIVE_SENTENCES[page.charset])

    def charset(self, url: str) -> str | None:
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.charset if page is not None and page.media_type == "text/html" else None

    def _answer(self, host: str, profile: HostProfile, path: str, nth: int, host_nth: int,
                now: float | None) -> Response:
        if path in self.robots_paths(host):
            return self._robots_answer(host, profile, path)
        if profile.fault is FaultHost.SESSIONS:
            path = _without_session_ids(path)  # session sites serve URLs with or without one
        page = self._lookup(host, path)
        if page is None or page.status == 404:
            return _html_response(404, _error_html(f"Not found: {path}"))
        if profile.fault is FaultHost.RECOVERING and host_nth <= RECOVERING_FAILURES:
            return _html_response(503, _error_html("Down for maintenance"))
        if page.fault is not None:
            failing = self._failing_answer(host, page, nth, now)
            if failing is not None:
                return failing
        if page.first_status and nth <= 1:
            retry_after = RETRY_AFTER_429 if page.first_status == 429 else RETRY_AFTER_503
            return Response(page.first_status,
                            (("Content-Type", "text/html; charset=utf-8"),
                             ("Retry-After", str(retry_after))),
                            _error_html("Too busy, come back later"))
        if page.status in (301, 302):
            return Response(page.status,
                            (("Content-Type", "text/html; charset=utf-8"),
                             ("Location", page.location)),
                            _error_html(f"Moved to {page.location}"))
        if page.media_type != "text/html":
            return Response(200, (("Content-Type", page.media_type),),
                            self._resource_body(host, page))
        return self._page_answer(host, page)

    def _page_answer(self, host: str, page: _Page) -> Response:
        if page.fault is PageFault.WRONG_CHARSET:
            content_type = "text/html; charset=utf-8"
        elif page.fault is PageFault.MISSING_CHARSET or page.charset == "windows-1252":
            content_type = "text/html"
        else:
            content_type = f"text/html; charset={page.charset}"
        if page.fault in (PageFault.OVERSIZED, PageFault.GZIP_BOMB, PageFault.POISON):
            headers: tuple[tuple[str, str], ...] = (("Content-Type", content_type),)
            if page.fault is PageFault.GZIP_BOMB:
                headers += (("Content-Encoding", "gzip"),)
            return Response(200, headers, self._big_bodies(host, page.path))
        return Response(200, (("Content-Type", content_type),),
                        self._html(host, page.copy_of or page.path))

    def _resource_body(self, host: str, page: _Page) -> bytes:
        marker = f"{host}{page.path} seed {self.spec.seed}"
        if page.media_type == "application/pdf":
            extra = " (download copy)" if "download=1" in page.path else ""
            return _pdf_bytes(f"Quarterly report for {marker}{extra}")
        if page.media_type == "image/png":
            return _png_bytes(marker, _rng(self.spec.seed, host, page.path, "png"))
        rng = _rng(self.spec.seed, host, page.path, "json")
        item = {"host": host, "path": page.path, "seed": self.spec.seed,
                "title": f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}",
                "tags": rng.sample(_NOUNS, 3), "price": rng.randrange(100, 9999) / 100}
        return json.dumps(item, sort_keys=True, indent=2).encode()

    def _render_html(self, host: str, path: str) -> bytes:
        page = self._lookup(host, path)
        assert page is not None
        rng = _rng(self.spec.seed, host, page.prose_of or path, "prose")
        url = self.url(host, path)
        key = self.key_phrase(url)
        native = self.native_phrase(url) or ""
        house = _rng(self.spec.seed, host, "house") if page.template == "story" else None
        edits = _rng(self.spec.seed, host, path, "edits") if page.edits else None
        main = _main_html(page, rng, key, native, house, edits)
        return _layout(page, host, main, rng).encode(page.charset)
