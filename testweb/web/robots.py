"""robots.txt (RFC 9309): the files the hosts serve, how each host answers for it (found,
missing, failing, hanging, redirected on the host or to another host), and what its rules
allow. The files are built from these values, and the ground truth matches against the same
values, so what is served and what is expected cannot drift apart."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from testweb.web.bodies import _text_response
from testweb.web.hosts import WebBase
from testweb.web.model import Response, _HostPlan, _Page
from testweb.web.prose import _fault_title
from testweb.web.spec import (
    DISALLOW_ALL_KINDS,
    TEST_TLD,
    HostProfile,
    HostRole,
    RobotsHost,
    RobotsKind,
)

_ROBOTS_PATH = "/robots.txt"
_MOVED_ROBOTS_PATH = "/robots-moved.txt"
# Where each RobotsHost's /robots.txt redirects (None: it serves the file).
_ROBOTS_ELSEWHERE: dict[RobotsHost, RobotsHost | None] = {
    RobotsHost.HOME: None, RobotsHost.MOVED: RobotsHost.HOME,
    RobotsHost.RELAYED: RobotsHost.MOVED,
}
# Their pages: one the shared rules disallow, one they allow by an Allow rule.
_ROBOTS_HOST_PAGES = ("/about.html", "/private/report.html", "/news.html",
                      "/private/open/guide.html", "/archive.html")


@dataclass(frozen=True)
class RobotsGroup:
    user_agents: tuple[str, ...]
    rules: tuple[tuple[bool, str], ...]  # (allow, pattern) in file order
    crawl_delay: str | None = None  # as written, e.g. "1" or "0.75"


@dataclass(frozen=True)
class RobotsFile:
    groups: tuple[RobotsGroup, ...]
    comment: str = ""
    sitemaps: tuple[str, ...] = ()  # absolute URLs of Sitemap lines, after the groups

    def text(self) -> str:
        lines = [f"# {self.comment}"] if self.comment else []
        for group in self.groups:
            if lines:
                lines.append("")
            lines.extend(f"User-agent: {name}" for name in group.user_agents)
            lines.extend(f"{'Allow' if allow else 'Disallow'}: {pat}" for allow, pat in group.rules)
            if group.crawl_delay is not None:
                lines.append(f"Crawl-delay: {group.crawl_delay}")
        if self.sitemaps:
            lines.append("")
            lines.extend(f"Sitemap: {url}" for url in self.sitemaps)
        return "\n".join(lines) + "\n" if lines else ""

    def group_for(self, user_agent: str) -> RobotsGroup | None:
        """The group that applies: the one naming the crawler's product token, else `*`."""
        token = product_token(user_agent)
        star = None
        for group in self.groups:
            names = [name.lower() for name in group.user_agents]
            if token in names:
                return group
            if "*" in names and star is None:
                star = group
        return star

    def allowed(self, path_and_query: str, user_agent: str) -> bool:
        if path_and_query == _ROBOTS_PATH:
            return True
        group = self.group_for(user_agent)
        if group is None:
            return True
        best_len, best_allow = -1, True
        for allow, pattern in group.rules:
            if not pattern or not _robots_pattern(pattern).match(path_and_query):
                continue
            length = len(pattern)
            # Longest match wins; on a tie the least restrictive (Allow) wins: RFC 9309 2.2.2.
            if length > best_len or (length == best_len and allow):
                best_len, best_allow = length, allow
        return best_allow

    def crawl_delay(self, user_agent: str) -> float:
        group = self.group_for(user_agent)
        return float(group.crawl_delay) if group and group.crawl_delay else 0.0


def product_token(user_agent: str) -> str:
    """`BeamCrawler/0.1 (+http://...)` -> `beamcrawler`: what robots.txt groups name."""
    return user_agent.strip().split("/", 1)[0].split(" ", 1)[0].lower()


@lru_cache(maxsize=64)
def _robots_pattern(pattern: str) -> re.Pattern[str]:
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    regex = ".*".join(re.escape(part) for part in body.split("*"))
    return re.compile(regex + ("$" if anchored else ""), re.DOTALL)


def _rules_file(host: str, crawl_delay: str) -> RobotsFile:
    return RobotsFile(
        comment=f"robots.txt for {host}",
        groups=(
            # Another crawler's group: it must not apply to us, nor its Crawl-delay.
            RobotsGroup(user_agents=("otherbot",), rules=((False, "/"),), crawl_delay="5"),
            RobotsGroup(
                user_agents=("*",),
                rules=(
                    (False, "/private/"),
                    (True, "/private/open/"),
                    (False, "/*.pdf$"),
                    (False, "/a=b/"),
                    (False, "/search?q="),
                ),
                crawl_delay=crawl_delay,
            ),
        ),
    )


def _moved_rules_file(host: str) -> RobotsFile:
    return RobotsFile(
        comment=f"robots.txt for {host} (moved)",
        groups=(
            RobotsGroup(user_agents=("*",), rules=((False, "/private/"), (False, "/search?q="))),
        ),
    )


class RobotsFiles(WebBase):
    """Each host's robots.txt: its rules, its answer, and the RobotsHost hosts that share
    one file."""

    def robots_host(self, kind: RobotsHost) -> str:
        name = f"robots-{kind}{TEST_TLD}"
        if name not in self._profiles:
            raise KeyError(f"{name} is not on this web: build it with "
                           f"WebSpec(robots_elsewhere=True)")
        return name

    def robots_redirect(self, host: str) -> str | None:
        """Where the host's /robots.txt redirects on another host (None: it does not)."""
        if self.robots_kind(host) is not RobotsKind.ELSEWHERE:
            return None
        target = _ROBOTS_ELSEWHERE[RobotsHost(host.removeprefix("robots-")
                                              .removesuffix(TEST_TLD))]
        assert target is not None
        return self.url(self.robots_host(target), _ROBOTS_PATH)

    def robots_source(self, host: str) -> tuple[str, str]:
        """(host, path) of the robots.txt file whose rules govern `host`, redirects followed
        (the host itself for every host but the RobotsHost ones that redirect)."""
        seen = [host]
        while (target := self.robots_redirect(seen[-1])) is not None:
            seen.append(self.split_url(target)[0])
        final = seen[-1]
        return final, _MOVED_ROBOTS_PATH if self.robots_kind(final) is RobotsKind.REDIRECT \
            else _ROBOTS_PATH

    def robots_paths(self, host: str) -> frozenset[str]:
        """Paths a crawler may request on `host` as robots.txt (redirects included)."""
        if self.robots_kind(host) is RobotsKind.REDIRECT:
            return frozenset({_ROBOTS_PATH, _MOVED_ROBOTS_PATH})
        return frozenset({_ROBOTS_PATH})

    def robots_file(self, host: str) -> RobotsFile | None:
        """The rules that govern `host` once robots.txt is read (None: no 2xx robots.txt)."""
        if self.profile(host).role is HostRole.SITEMAPS:
            return self._sitemap_robots_file(host)
        kind = self.robots_kind(host)
        if kind is RobotsKind.ALLOW_ALL:
            return RobotsFile(groups=(RobotsGroup(user_agents=("*",), rules=((True, "/"),)),))
        if kind is RobotsKind.EMPTY:
            return RobotsFile(groups=())
        if kind is RobotsKind.RULES:
            return _rules_file(host, "1")
        if kind is RobotsKind.RULES_FRACTIONAL_DELAY:
            return _rules_file(host, "0.75")
        if kind is RobotsKind.REDIRECT:
            return _moved_rules_file(host)
        if kind is RobotsKind.ELSEWHERE:
            return self.robots_file(self.robots_source(host)[0])
        return None

    def is_allowed(self, host: str, path_and_query: str, user_agent: str) -> bool:
        """Whether robots.txt lets `user_agent` fetch the path (5xx or hang: nothing is)."""
        kind = self.robots_kind(host)
        if kind in DISALLOW_ALL_KINDS:
            return False
        rules = self.robots_file(host)
        return True if rules is None else rules.allowed(path_and_query, user_agent)

    def crawl_delay(self, host: str, user_agent: str = "*") -> float:
        rules = self.robots_file(host)
        return rules.crawl_delay(user_agent) if rules is not None else 0.0

    def delay_for(self, host: str, min_delay: float, max_crawl_delay: float) -> float:
        """The least gap between two request starts on `host` for a correct crawler."""
        return max(min_delay, min(self.crawl_delay(host), max_crawl_delay))

    def is_robots_path(self, host: str, path_and_query: str) -> bool:
        """Whether a request for this path is a robots.txt request (False on unknown hosts)."""
        return host in self._profiles and path_and_query in self.robots_paths(host)

    def _robots_answer(self, host: str, profile: HostProfile, path: str) -> Response:
        kind = profile.robots
        if kind is RobotsKind.REDIRECT and path == _ROBOTS_PATH:
            location = self.url(host, _MOVED_ROBOTS_PATH)
            return Response(301, (("Content-Type", "text/plain"), ("Location", location)),
                            f"Moved to {location}\n".encode())
        if kind is RobotsKind.ELSEWHERE:
            location = self.robots_redirect(host)
            assert location is not None
            status = 302 if host == self.robots_host(RobotsHost.RELAYED) else 301
            return Response(status, (("Content-Type", "text/plain"), ("Location", location)),
                            f"Moved to {location}\n".encode())
        if kind is RobotsKind.NOT_FOUND:
            return _text_response(404, "no robots.txt here\n")
        if kind is RobotsKind.SERVER_ERROR:
            return _text_response(500, "internal error\n")
        if kind is RobotsKind.UNAVAILABLE:
            return _text_response(503, "unavailable\n")
        if kind is RobotsKind.HANG:
            response = _text_response(503, "gave up\n")
            return Response(503, response.headers, response.body, self.spec.hang_seconds)
        rules = self.robots_file(host)
        assert rules is not None
        return _text_response(200, rules.text())

    def _add_robots_hosts(self) -> list[str]:
        """The RobotsHost hosts, after every other host; returns their names."""
        names = []
        first = len(self._profiles)
        for number, kind in enumerate(RobotsHost):
            name = f"robots-{kind}{TEST_TLD}"
            robots = RobotsKind.RULES if _ROBOTS_ELSEWHERE[kind] is None \
                else RobotsKind.ELSEWHERE
            profile = HostProfile(first + number, name, robots, HostRole.ROBOTS)
            self._profiles[name] = profile
            self._plans[name] = _HostPlan(profile=profile)
            names.append(name)
        return names

    def _register_robots_paths(self, plan: _HostPlan) -> None:
        plan.paths["/"] = "robots-home"
        for path in _ROBOTS_HOST_PAGES:
            plan.paths[path] = "robots-page"

    def _page_robots_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = [w.to(host, "/", "Home", area="nav")]
        links.extend(w.to(host, target, _fault_title(target)) for target in _ROBOTS_HOST_PAGES)
        return self._html_page(plan, path, "home", f"Welcome to {host}", links)

    def _page_robots_page(self, plan: _HostPlan, path: str) -> _Page:
        w = self._writer(plan, path)
        return self._html_page(plan, path, "article", _fault_title(path),
                               [w.to(plan.profile.name, "/", "Home", area="nav")])
