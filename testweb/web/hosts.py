"""The hosts of a web and what every part of it asks of them: names, URLs, the page behind a
path, and the frame (navigation, footer, charset) that pages share."""

from __future__ import annotations

from collections.abc import Callable

from testweb.web.links import _LinkWriter, canonical_query_order, split_url
from testweb.web.model import Link, _HostPlan, _Page
from testweb.web.prose import _CHARSETS, _rng
from testweb.web.spec import TEST_TLD, HostProfile, RobotsKind, WebSpec


class WebBase:
    """The state of a built web and the lookups every part of it shares.

    SyntheticWeb is this base with one part per thing the web simulates (regular sites,
    robots.txt files, sitemaps, traps, fault hosts, copies, answers, the ground truth); each
    part reads the state set by SyntheticWeb.__init__ and reaches the others through self.
    """

    spec: WebSpec
    port: int
    _profiles: dict[str, HostProfile]
    _plans: dict[str, _HostPlan]
    _seeds: list[str]
    _robots_hosts: list[str]
    _sitemap_hosts: list[str]
    _page: Callable[[str, str], _Page | None]
    _html: Callable[[str, str], bytes]
    _big_bodies: Callable[[str, str], bytes]

    def hosts(self) -> list[str]:
        return list(self._profiles)

    def profile(self, host: str) -> HostProfile:
        try:
            return self._profiles[host]
        except KeyError:
            raise KeyError(f"{host!r} is not a host of this web (site-NNNN.test, or "
                           f"fault-KIND.test with WebSpec.faults)") from None

    def robots_kind(self, host: str) -> RobotsKind:
        return self.profile(host).robots

    def parent_host(self, host: str) -> str | None:
        """The host whose pages link this host's home first (None for seed hosts)."""
        return self._plans[host].parent

    def origin(self, host: str) -> str:
        return f"http://{host}" if self.port == 80 else f"http://{host}:{self.port}"

    def url(self, host: str, path_and_query: str = "/") -> str:
        return self.origin(host) + path_and_query

    def canonical_url(self, url: str) -> str:
        """The URL under which the web files the page `url` names (the ground truth's spelling:
        see canonical_query_order)."""
        host, path = self.split_url(url)
        return self.url(host, canonical_query_order(path))

    # `http://h:p/a?b` -> (`h`, `/a?b`), as SyntheticWeb.split_url.
    split_url = staticmethod(split_url)

    def page_urls(self, host: str) -> list[str]:
        """Every URL the host serves as a page (not robots.txt, not the calendar's months)."""
        return [self.url(host, path) for path in self._plans[host].paths]

    def _site(self, index: int) -> str:
        """The name of regular host number `index`."""
        return f"site-{index:04d}.{self.spec.domain}" if self.spec.domain \
            else f"site-{index:04d}{TEST_TLD}"

    def _lookup(self, host: str, path: str) -> _Page | None:
        if host not in self._profiles:
            return None
        return self._page(host, canonical_query_order(path))

    def _content_owner(self, host: str, path: str) -> str:
        page = self._lookup(host, path)
        if page is None:
            return path
        return page.copy_of or page.text_of or path

    def _writer(self, plan: _HostPlan, path: str, base_href: str | None = None) -> _LinkWriter:
        return _LinkWriter(self, plan.profile.name, path, base_href,
                           _rng(self.spec.seed, plan.profile.name, path, "links"))

    def _charset_for(self, plan: _HostPlan, path: str) -> str:
        # Round robin over the host's paths, so every host serves every charset.
        position = next((i for i, p in enumerate(plan.paths) if p == path), len(path))
        return _CHARSETS[(position + plan.profile.index) % len(_CHARSETS)]

    def _nav(self, w: _LinkWriter) -> list[Link]:
        return [
            w.to(w.host, "/", "Home", area="nav"),
            w.to(w.host, "/articles/", "Articles", area="nav"),
            w.to(w.host, "/products/", "Shop", area="nav"),
            w.to(w.host, "/forum/", "Forum", area="nav"),
            w.to(w.host, "/about/imprint.html", "Imprint", area="nav"),
        ]

    def _footer(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        links = [w.to(seed, "/", f"Partner: {seed}", area="footer") for seed in self._seeds
                 if seed != plan.profile.name]
        links.append(w.to(w.host, "/members/login", "Sign in", area="footer", rel="nofollow"))
        links.append(w.to(w.host, "/members/join", "Join", area="footer",
                          rel="noopener nofollow"))
        return links

    def _html_page(self, plan: _HostPlan, path: str, template: str, title: str,
                   links: list[Link], **extra: object) -> _Page:
        return _Page(
            path=path,
            template=template,
            title=title,
            links=tuple(links),
            canonical=self.url(plan.profile.name, path),
            charset=self._charset_for(plan, path),
            **extra,  # type: ignore[arg-type]
        )
