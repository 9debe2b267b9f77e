"""The sitemap hosts (WebSpec.sitemaps): robots.txt Sitemap lines, a sitemap index, URL sets
(one gzip-compressed), a broken and a missing sitemap, and the pages only they list."""

from __future__ import annotations

from testweb.web.bodies import _error_html, _gzip_bytes, _html_response, _text_response
from testweb.web.hosts import WebBase
from testweb.web.model import Response, _HostPlan
from testweb.web.robots import _ROBOTS_PATH, RobotsFile, RobotsGroup
from testweb.web.spec import TEST_TLD, HostProfile, HostRole, RobotsKind, SitemapHost

# sitemap-home.test's pages no page links: only its sitemaps list them.
SITEMAP_ONLY_PAGES = ("/hidden/1.html", "/hidden/2.html", "/hidden/3.html")
# Listed in a sitemap, disallowed by robots.txt: ends `disallowed` without a request.
SITEMAP_DISALLOWED_PAGE = "/private/listed.html"
SITEMAP_INDEX = "/sitemap-index.xml"  # lists itself, SITEMAP_PAGES and SITEMAP_GZIP
SITEMAP_PAGES = "/sitemap-pages.xml"
SITEMAP_GZIP = "/sitemap-more.xml.gz"  # application/gzip, no Content-Encoding
SITEMAP_BROKEN = "/broken-sitemap.xml"  # application/xml that is not well-formed
SITEMAP_MISSING = "/missing-sitemap.xml"  # 404
# What robots.txt's Sitemap lines name, in order.
SITEMAP_LINES = (SITEMAP_INDEX, SITEMAP_BROKEN, SITEMAP_MISSING)
SITEMAP_OTHER_PAGE = "/listed.html"  # on sitemap-other.test


class Sitemaps(WebBase):
    """The SitemapHost hosts and everything they answer."""

    def sitemap_host(self, kind: SitemapHost) -> str:
        name = f"sitemap-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with WebSpec(sitemaps=True)")
        return name

    def _add_sitemap_hosts(self) -> list[str]:
        """The SitemapHost hosts, after every other host; returns their names."""
        names = []
        first = len(self._profiles)
        for number, kind in enumerate(SitemapHost):
            name = f"sitemap-{kind}{TEST_TLD}"
            profile = HostProfile(first + number, name, RobotsKind.ALLOW_ALL, HostRole.SITEMAPS)
            self._profiles[name] = profile
            self._plans[name] = _HostPlan(profile=profile)
            names.append(name)
        return names

    def _sitemap_robots_file(self, host: str) -> RobotsFile:
        star = RobotsGroup(user_agents=("*",), rules=((False, "/private/"),))
        if host != self.sitemap_host(SitemapHost.HOME):
            return RobotsFile(groups=(star,), comment=f"robots.txt for {host}")
        return RobotsFile(groups=(star,), comment=f"robots.txt for {host}",
                          sitemaps=tuple(self.url(host, path) for path in SITEMAP_LINES))

    def sitemap_pages(self) -> dict[str, tuple[str, ...]]:
        """Each sitemap of sitemap-home.test that lists URLs (index, URL sets) -> what it
        lists, as absolute URLs."""
        home = self.sitemap_host(SitemapHost.HOME)
        other = self.sitemap_host(SitemapHost.OTHER)
        return {
            SITEMAP_INDEX: tuple(self.url(home, path)
                                 for path in (SITEMAP_INDEX, SITEMAP_PAGES, SITEMAP_GZIP)),
            SITEMAP_PAGES: (self.url(home, "/"), self.url(home, "/about.html"),
                            *(self.url(home, path) for path in SITEMAP_ONLY_PAGES[:2]),
                            self.url(home, SITEMAP_DISALLOWED_PAGE),
                            self.url(other, SITEMAP_OTHER_PAGE)),
            SITEMAP_GZIP: tuple(self.url(home, path) for path in SITEMAP_ONLY_PAGES[2:]),
        }

    def _sitemap_answer(self, host: str, path: str) -> Response:
        if path == _ROBOTS_PATH:
            return _text_response(200, self._sitemap_robots_file(host).text())
        home = host == self.sitemap_host(SitemapHost.HOME)
        pages = {"/": ("/about.html",), "/about.html": ("/",)} if home else {
            SITEMAP_OTHER_PAGE: ()}
        if home:
            pages.update({page: () for page in (*SITEMAP_ONLY_PAGES, SITEMAP_DISALLOWED_PAGE)})
        if path in pages:
            links = "".join(f'<p><a href="{link}">{link}</a></p>' for link in pages[path])
            body = (f"<!DOCTYPE html><html><head><title>{host}{path}</title></head><body>"
                    f"<h1>{host}{path}</h1><p>{self.key_phrase(self.url(host, path))} "
                    f"This page is at {path} on {host}.</p>{links}</body></html>")
            return _html_response(200, body.encode())
        listed = self.sitemap_pages() if home else {}
        if path in listed:
            entry, root = ("sitemap", "sitemapindex") if path == SITEMAP_INDEX else ("url",
                                                                                     "urlset")
            xml = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                   f'<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                   + "".join(f"  <{entry}><loc>{url}</loc></{entry}>\n" for url in listed[path])
                   + f"</{root}>\n").encode()
            if path == SITEMAP_GZIP:
                return Response(200, (("Content-Type", "application/gzip"),),
                                _gzip_bytes(xml))
            return Response(200, (("Content-Type", "application/xml"),), xml)
        if home and path == SITEMAP_BROKEN:
            return Response(200, (("Content-Type", "application/xml"),),
                            b'<?xml version="1.0"?>\n<urlset><url><loc>'
                            + self.url(host, "/hidden/never.html").encode() + b"</loc></url")
        return _html_response(404, _error_html(f"Not found: {path}"))
