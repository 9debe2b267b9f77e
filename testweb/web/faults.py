"""The fault hosts (WebSpec.faults): servers that break connections, stall, hang, fail for a
while or for good, send oversized or hostile bodies and wrong charsets, loop redirects, trap
paths and tag every link with a session id; and how each of their pages fails."""

from __future__ import annotations

import email.utils
import hashlib
import random
import re
import time
from dataclasses import replace

from testweb.web.bodies import _error_html, _gzip_bomb, _html_response
from testweb.web.hosts import WebBase
from testweb.web.links import _LinkWriter
from testweb.web.model import Link, Response, _HostPlan, _Page, _redirect
from testweb.web.prose import _NOUNS, _fault_title
from testweb.web.spec import TEST_TLD, FaultHost, HostProfile, HostRole, PageFault, RobotsKind

# The busy page's Retry-After is an HTTP-date this many seconds ahead of the server's clock.
RETRY_AFTER_DATE_SECONDS = 3
# The errors host's 503 asks for this many seconds (delta-seconds): longer than a crawler's
# usual first backoff, so a crawler that ignores Retry-After comes back visibly too early.
RETRY_AFTER_ERRORS_503 = 3
# Page requests the recovering host answers 503 before it recovers.
RECOVERING_FAILURES = 2
# Pages the warming host's home links (each answers 503 with Retry-After once): above the
# crawler's default --circuit-failures of 10.
WARMING_PAGES = 12
# The maze's redirect chain: /chain/1 -> ... -> /chain/CHAIN_LENGTH, which answers 200.
CHAIN_LENGTH = 8
# The garbage a broken server sends instead of a status line.
BAD_STATUS_LINE = b"HTTX/9 nonsense\r\nContent-Type: text/html\r\n\r\nnot an HTTP answer\n"
_NEVER_RECOVERS = 1 << 30  # failing answers of a page that fails forever
# The copies host: one wire article, COPIES_EXACT byte-identical copies of it, COPIES_NEAR
# copies with one or two words changed, and COPIES_DISTINCT articles of their own.
COPIES_EXACT = 9
COPIES_NEAR = 10
COPIES_DISTINCT = 4
# Paragraphs of a wire article (~2,000 words): long enough that changing a word or two moves
# few of its simhash's 64 bits.
_WIRE_PARAGRAPHS = 36
_WIRE_ORIGINAL = "/wire/story.html"

# The pages a fault host's home links, in link order. Failing pages sit between good ones, so
# a crawler that keeps link order sees no run of failures longer than one page's attempts.
_FAULT_PAGES: dict[FaultHost, tuple[str, ...]] = {
    FaultHost.RESET: ("/about.html", "/broken/reset.html", "/news.html"),
    FaultHost.BAD_STATUS: ("/about.html", "/broken/status.html", "/news.html"),
    FaultHost.STALL: ("/about.html", "/broken/stall.html", "/news.html"),
    FaultHost.HANG: ("/about.html", "/broken/hang.html", "/news.html"),
    FaultHost.ERRORS: ("/notes/1.html", "/errors/408.html", "/notes/2.html", "/errors/500.html",
                       "/notes/3.html", "/errors/502.html", "/notes/4.html", "/errors/504.html",
                       "/notes/5.html", "/errors/503.html"),
    FaultHost.DEAD: ("/status.html",),
    FaultHost.RECOVERING: ("/recovered/1.html", "/recovered/2.html", "/recovered/3.html"),
    FaultHost.BUSY: ("/busy/report.html", "/busy/notes.html"),
    FaultHost.BODIES: ("/about.html", "/big/oversized.html", "/big/bomb.html",
                       "/charset/wrong.html", "/charset/missing.html", "/poison.html"),
    FaultHost.MAZE: ("/about.html", "/loop/a", "/chain/1", "/loop/x/"),
    FaultHost.SESSIONS: ("/shop/", "/shop/item-1.html", "/shop/item-2.html",
                         "/shop/item-3.html", "/shop/item-4.html", "/shop/list?page=2"),
    FaultHost.COPIES: (_WIRE_ORIGINAL,
                       *(f"/wire/copy-{n}.html" for n in range(1, COPIES_EXACT + 1)),
                       *(f"/wire/edit-{n}.html" for n in range(1, COPIES_NEAR + 1)),
                       *(f"/wire/other-{n}.html" for n in range(1, COPIES_DISTINCT + 1))),
    FaultHost.WARMING: tuple(f"/warming/{n}.html" for n in range(1, WARMING_PAGES + 1)),
}
_PAGE_FAULTS: dict[str, PageFault] = {
    "/broken/reset.html": PageFault.RESET,
    "/broken/status.html": PageFault.BAD_STATUS_LINE,
    "/broken/stall.html": PageFault.STALL,
    "/broken/hang.html": PageFault.HANG,
    "/busy/report.html": PageFault.RETRY_DATE,
    "/big/oversized.html": PageFault.OVERSIZED,
    "/big/bomb.html": PageFault.GZIP_BOMB,
    "/charset/wrong.html": PageFault.WRONG_CHARSET,
    "/charset/missing.html": PageFault.MISSING_CHARSET,
    "/poison.html": PageFault.POISON,
}
_TRAP_PATH = re.compile(r"/loop/(?:x/)+")
# Session-id parameters a server accepts and a crawler drops (query names match any case).
_SESSION_QUERY_NAMES = frozenset({"sid", "sessionid", "session_id", "jsessionid", "phpsessid",
                                  "aspsessionid"})
_SESSION_PATH_PARAMETER = re.compile(r";jsessionid=[^/;?#]*", re.IGNORECASE)


def _without_session_ids(path_and_query: str) -> str:
    path, _, query = path_and_query.partition("?")
    path = _SESSION_PATH_PARAMETER.sub("", path) or "/"
    params = [p for p in query.split("&")
              if p and p.partition("=")[0].lower() not in _SESSION_QUERY_NAMES] if query else []
    return path + ("?" + "&".join(params) if params else "")


def _linked_paths(kind: FaultHost | None) -> tuple[str, ...]:
    """The URLs of a fault host that link into it from outside (both of the dead host's)."""
    return ("/", "/status.html") if kind is FaultHost.DEAD else ("/",)


class FaultHosts(WebBase):
    """The FaultHost hosts: where they hang in the web, their pages, and how those pages fail."""

    def fault(self, url: str) -> PageFault | None:
        """How the page at `url` misbehaves (None: it does not)."""
        host, path = self.split_url(url)
        page = self._lookup(host, path)
        return page.fault if page is not None else None

    def fault_hosts(self) -> list[str]:
        """The fault hosts (empty unless WebSpec.faults)."""
        return [h for h, p in self._profiles.items() if p.fault is not None]

    def fault_host(self, kind: FaultHost) -> str:
        name = f"fault-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with WebSpec(faults=True) "
                           f"(and, with only_faults, name {kind!r} there)")
        return name

    def _recovers(self, host: str) -> bool:
        profile = self._profiles.get(host)
        return profile is not None and profile.fault is FaultHost.RECOVERING

    def _add_fault_hosts(self, kinds: tuple[FaultHost, ...]) -> list[str]:
        """Fault hosts hang off the seed hosts' home pages, outside the spanning tree: only
        that page (and their own pages) link them, so their depths are deterministic. On a
        web of only fault hosts (no regular seeds) they are the seeds; returns their names."""
        names = []
        for number, kind in enumerate(FaultHost):
            if kind not in kinds:
                continue
            name = f"fault-{kind}{TEST_TLD}"
            robots = RobotsKind.NOT_FOUND if kind in (FaultHost.DEAD, FaultHost.RECOVERING) \
                else RobotsKind.ALLOW_ALL
            index = number if self.spec.only_faults else self.spec.hosts + number
            profile = HostProfile(index, name, robots, HostRole.FAULT, kind)
            self._profiles[name] = profile
            names.append(name)
            if self.spec.only_faults:
                self._plans[name] = _HostPlan(profile=profile)
                continue
            parent = self._seeds[number % len(self._seeds)]
            self._plans[name] = _HostPlan(profile=profile, parent=parent)
            self._plans[parent].fault_links += tuple(
                (name, path) for path in _linked_paths(kind))
        return names

    def _register_fault_paths(self, plan: _HostPlan) -> None:
        kind = plan.profile.fault
        assert kind is not None
        paths = plan.paths
        paths["/"] = "fault-home"
        for path in _FAULT_PAGES[kind]:
            paths[path] = "fault-trap" if path.startswith("/loop/x/") else \
                "fault-redirect" if path in ("/loop/a", "/chain/1") else "fault-page"
        if kind is FaultHost.COPIES:
            for path in _FAULT_PAGES[kind]:
                paths[path] = "copies-copy" if path.startswith("/wire/copy-") else "copies-story"
        if kind is FaultHost.MAZE:
            paths["/loop/b"] = "fault-redirect"
            for n in range(2, CHAIN_LENGTH):
                paths[f"/chain/{n}"] = "fault-redirect"
            paths[f"/chain/{CHAIN_LENGTH}"] = "fault-page"

    def _fault_links(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        return [w.to(host, path, f"Visit {host}" if path == "/" else f"Status of {host}",
                     area="aside") for host, path in plan.fault_links]

    def _fault_link(self, w: _LinkWriter, plan: _HostPlan, source: str, target: str,
                    text: str) -> Link:
        if plan.profile.fault is FaultHost.SESSIONS:
            return self._session_link(plan, source, target, text, w.rng)
        return w.to(w.host, target, text)

    def _session_link(self, plan: _HostPlan, source: str, target: str, text: str,
                      rng: random.Random) -> Link:
        """A link whose href carries the session id of the page it is written on."""
        host = plan.profile.name
        token = hashlib.sha256(f"{self.spec.seed}|{host}|{source}|session".encode()) \
            .hexdigest().upper()
        path, _, query = target.partition("?")
        params = query.split("&") if query else []
        style = rng.randrange(4)
        if style in (0, 3):
            path += f";jsessionid={token[:32]}"
        if style == 1:
            params.insert(rng.randrange(len(params) + 1), f"sid={token[:16].lower()}")
        elif style == 2:
            params.append(f"PHPSESSID={token[:26].lower()}")
        elif style == 3:
            name = rng.choice(("SessionID", "session_id", "ASPSESSIONID", "JSESSIONID"))
            params.insert(0, f"{name}={token[32:56]}")
        href = path + ("?" + "&".join(params) if params else "")
        return Link(href=href, target=self.url(host, target), text=text)

    def _page_fault_home(self, plan: _HostPlan, path: str) -> _Page:
        kind = plan.profile.fault
        assert kind is not None
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [self._fault_link(w, plan, path, "/", "Home") if kind is FaultHost.SESSIONS
                 else w.to(host, "/", "Home", area="nav")]
        links.extend(self._fault_link(w, plan, path, target, _fault_title(target))
                     for target in _FAULT_PAGES[kind])
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        page = self._html_page(plan, path, "home", f"Welcome to {host}", links)
        return self._with_fault(plan, page)

    def _page_fault_page(self, plan: _HostPlan, path: str) -> _Page:
        kind = plan.profile.fault
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        if kind is FaultHost.SESSIONS:
            links = [self._fault_link(w, plan, path, "/", "Home")]
            links.extend(self._fault_link(w, plan, path, target, _fault_title(target))
                         for target in _FAULT_PAGES[kind] if target != path)
        links.extend(self._footer(w, plan))
        page = self._html_page(plan, path, "article", _fault_title(path), links)
        return self._with_fault(plan, page)

    def _page_fault_redirect(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        if path == "/loop/a":
            return _redirect(path, 301, "/loop/b", self.url(host, "/loop/b"))
        if path == "/loop/b":
            return _redirect(path, 302, self.url(host, "/loop/a"), self.url(host, "/loop/a"))
        target = f"/chain/{int(path.removeprefix('/chain/')) + 1}"
        return _redirect(path, 301, target, self.url(host, target))

    def _page_fault_trap(self, plan: _HostPlan, path: str) -> _Page:
        """/loop/x/, /loop/x/x/, ...: a relative link "x/" nests the directory in itself."""
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav"),
                 Link(href="x/", target=self.url(host, path + "x/"), text="Go deeper")]
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", f"Index of {path}", links)

    def _with_fault(self, plan: _HostPlan, page: _Page) -> _Page:
        """The page as its fault host serves it."""
        if plan.profile.fault is FaultHost.WARMING:
            return replace(page, first_status=503)  # with Retry-After: RETRY_AFTER_503
        fault = PageFault.UNAVAILABLE if plan.profile.fault is FaultHost.DEAD \
            else _PAGE_FAULTS.get(page.path)
        error_status = 429 if fault is PageFault.RETRY_DATE else 0
        match = re.fullmatch(r"/errors/([0-9]{3})\.html", page.path)
        if match:
            fault, error_status = PageFault.ERROR_ONCE, int(match[1])
        if fault is None:
            return page
        status = {PageFault.RESET: 0, PageFault.BAD_STATUS_LINE: 0, PageFault.HANG: 503,
                  PageFault.UNAVAILABLE: 503}.get(fault, 200)
        charset = {PageFault.WRONG_CHARSET: "windows-1252",
                   PageFault.MISSING_CHARSET: "iso-8859-1"}.get(fault, page.charset)
        return replace(page, fault=fault, status=status, error_status=error_status,
                       charset=charset)

    def _failing_answer(self, host: str, page: _Page, nth: int,
                        now: float | None) -> Response | None:
        """The answer of a page that fails this time (None: it answers normally)."""
        fault = page.fault
        if fault is PageFault.RESET:
            return Response(0, (), b"", fault="reset")
        if fault is PageFault.BAD_STATUS_LINE:
            return Response(0, (), BAD_STATUS_LINE, fault="bad-status-line")
        if fault is PageFault.STALL:
            return replace(self._page_answer(host, page), fault="stall",
                           stall_seconds=self.spec.hang_seconds)
        if fault is PageFault.HANG:
            return replace(_html_response(503, _error_html("Gave up")),
                           delay_before=self.spec.hang_seconds)
        if fault is PageFault.UNAVAILABLE:
            return _html_response(503, _error_html("Service unavailable"))
        if fault is PageFault.ERROR_ONCE and nth <= 1:
            answer = _html_response(page.error_status, _error_html(f"Error {page.error_status}"))
            if page.error_status == 503:  # unavailable, and says for how long (delta-seconds)
                answer = replace(answer, headers=answer.headers + (
                    ("Retry-After", str(RETRY_AFTER_ERRORS_503)),))
            return answer
        if fault is PageFault.RETRY_DATE and nth <= 1:
            clock = time.time() if now is None else now
            retry_at = email.utils.formatdate(clock + RETRY_AFTER_DATE_SECONDS, usegmt=True)
            return Response(429, (("Content-Type", "text/html; charset=utf-8"),
                                  ("Retry-After", retry_at)),
                            _error_html("Too many requests, come back later"))
        return None

    def _render_big_body(self, host: str, path: str) -> bytes:
        page = self._lookup(host, path)
        assert page is not None
        html = self._html(host, path)
        if page.fault is PageFault.POISON:
            # A page cache wrapped the page in a comment it never closed: no document at all.
            assert b"-->" not in html
            return b"<!DOCTYPE html>\n<!-- cached copy, kept by the page cache:\n" + html
        if page.fault is PageFault.GZIP_BOMB:
            return _gzip_bomb(html, self.spec.bomb_bytes)
        # Oversized: an inline data island just before </body>, so the page's links and text
        # all come before any cut.
        head, _, tail = html.rpartition(b"</body>")
        opening, closing = b'<script type="application/json" id="archive">[\n', b"]</script>\n"
        room = self.spec.big_body_bytes - len(head) - len(opening) - len(closing) - len(tail) \
            - len(b"</body>")
        records = bytearray()
        number = 0
        while len(records) < room:
            records += b'{"record": %d, "title": "%s"},\n' % (
                number, _NOUNS[number % len(_NOUNS)].encode())
            number += 1
        return head + opening + bytes(records[:room]) + closing + b"</body>" + tail
