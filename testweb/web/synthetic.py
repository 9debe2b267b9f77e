"""SyntheticWeb: a seeded web built from its parts (regular sites, robots.txt files,
sitemaps, traps, fault hosts, copies), with its answers and its ground truth."""

from __future__ import annotations

from functools import lru_cache

from testweb.web.duplicates import Duplicates
from testweb.web.faults import _TRAP_PATH, FaultHosts, _linked_paths
from testweb.web.model import _HostPlan, _Page
from testweb.web.robots import RobotsFiles
from testweb.web.serving import Answers
from testweb.web.sitemaps import Sitemaps
from testweb.web.sites import RegularSites
from testweb.web.spec import _PROFILE_CYCLE, FaultHost, HostProfile, HostRole, WebSpec
from testweb.web.traps import CalendarTrap
from testweb.web.truth import GroundTruth


class SyntheticWeb(GroundTruth, Answers, RegularSites, Duplicates, FaultHosts, CalendarTrap,
                   Sitemaps, RobotsFiles):
    """A seeded web of `spec.hosts` virtual hosts, as served on `port` (used in absolute URLs)."""

    def __init__(self, spec: WebSpec, port: int) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"port={port} is not a TCP port: serve first, then build the web")
        self.spec = spec
        self.port = port
        self._profiles: dict[str, HostProfile] = {}
        for index in range(0 if spec.only_faults else spec.hosts):
            robots, role = _PROFILE_CYCLE[index % len(_PROFILE_CYCLE)]
            name = self._site(index)
            self._profiles[name] = HostProfile(index, name, robots, role)
        self._plans = {name: self._plan_host(profile) for name, profile in self._profiles.items()}
        if spec.only_faults:
            self._seeds = self._add_fault_hosts(tuple(FaultHost(k) for k in spec.only_faults))
        elif spec.hosts:
            self._seeds = self._link_hosts()
            if spec.faults:
                self._add_fault_hosts(tuple(FaultHost))
                self._plan_stories()
        else:
            self._seeds = []
        # Seeds of their own, kept apart from _seeds: regular pages link _seeds in footers.
        self._robots_hosts = self._add_robots_hosts() if spec.robots_elsewhere else []
        self._sitemap_hosts = self._add_sitemap_hosts() if spec.sitemaps else []
        for plan in self._plans.values():
            self._register_paths(plan)
        self._page = lru_cache(maxsize=16384)(self._materialise)
        self._html = lru_cache(maxsize=8192)(self._render_html)
        self._big_bodies = lru_cache(maxsize=4)(self._render_big_body)

    def seeds(self) -> list[str]:
        """A handful of home pages on plain hosts; every host is reachable from them. With
        WebSpec.only_faults: the URLs a seed host's home would link on each fault host."""
        if self.spec.only_faults:
            seeds = [self.url(host, path) for host in self._seeds
                     for path in _linked_paths(self._profiles[host].fault)]
        else:
            seeds = [self.url(host, "/") for host in self._seeds]
        return seeds + [self.url(host, "/") for host in self._robots_hosts] + [
            self.url(host, "/") for host in self._sitemap_hosts[:1]]

    def _register_paths(self, plan: _HostPlan) -> None:
        """Every path the host serves, with the kind of page behind it."""
        if plan.profile.role is HostRole.CALENDAR:
            plan.paths["/"] = "calendar-home"
        elif plan.profile.fault is not None:
            self._register_fault_paths(plan)
        elif plan.profile.role is HostRole.ROBOTS:
            self._register_robots_paths(plan)
        elif plan.profile.role is not HostRole.SITEMAPS:  # those answer apart (_sitemap_answer)
            self._register_site_paths(plan)
            self._register_extra_paths(plan)

    def _materialise(self, host: str, path: str) -> _Page | None:
        plan = self._plans[host]
        if plan.profile.role is HostRole.CALENDAR:
            return self._calendar_page(plan, path)
        kind = plan.paths.get(path)
        if kind is None and plan.profile.fault is FaultHost.MAZE and _TRAP_PATH.fullmatch(path):
            kind = "fault-trap"
        if kind is None:
            return None
        builder = getattr(self, f"_page_{kind.replace('-', '_')}")
        page: _Page = builder(plan, path)
        return page
