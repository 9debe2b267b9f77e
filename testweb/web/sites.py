"""The regular hosts: each host's plan (articles, products, forum threads, feature pages,
resources, redirects), the spanning tree of links between hosts, and their pages."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from testweb.web.hosts import WebBase
from testweb.web.links import _LinkWriter
from testweb.web.model import Link, _HostPlan, _Page, _redirect
from testweb.web.prose import _ADJECTIVES, _NOUNS, _rng, _title_from_slug
from testweb.web.spec import _FEATURE_PAGES, TEST_TLD, HostProfile, HostRole, RobotsKind


class RegularSites(WebBase):
    """The regular hosts' plans and pages."""

    def _plan_host(self, profile: HostProfile) -> _HostPlan:
        plan = _HostPlan(profile=profile)
        if profile.role is HostRole.CALENDAR:
            return plan
        rng = _rng(self.spec.seed, profile.name, "plan")
        items = self.spec.pages_per_host - 4 - _FEATURE_PAGES
        n_articles = max(4, round(items * 0.4))
        n_products = max(2, round(items * 0.3))
        n_threads = max(1, items - n_articles - n_products)
        slugs: list[str] = []
        while len(slugs) < n_articles:
            slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS), rng.choice(_NOUNS)))
            if slug not in slugs:
                slugs.append(slug)
        plan.articles = tuple(slugs)
        plan.products = tuple(sorted(rng.sample(range(100, 1000), n_products)))
        with_page2 = n_threads // 3
        first_thread = rng.randrange(1000, 9000)
        plan.threads = tuple(range(first_thread, first_thread + n_threads - with_page2))
        plan.threads_with_page2 = frozenset(plan.threads[:with_page2])
        plan.search_word = rng.choice(_NOUNS)
        plan.old_slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS)))
        plan.daily_date = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        return plan

    def _link_hosts(self) -> list[str]:
        """Pick seed hosts and give every other host a parent: a spanning tree over hosts."""
        rng = _rng(self.spec.seed, "hosts")
        names = list(self._profiles)
        plain = [n for n in names if self._profiles[n].role is HostRole.REGULAR
                 and self._profiles[n].robots in (RobotsKind.ALLOW_ALL, RobotsKind.EMPTY)]
        if not plain:
            raise ValueError("this web has no plain host to seed from")
        seeds = sorted(rng.sample(plain, min(self.spec.seed_hosts, len(plain))))
        others = [n for n in names if n not in seeds]
        rng.shuffle(others)
        parents = list(seeds)
        for name in others:
            parent = rng.choice(parents)
            plan = self._plans[parent]
            roll = rng.random()
            if roll < 0.6:
                where = "/"
            elif roll < 0.8:
                where = "/forum/"
            else:
                where = f"/articles/{rng.choice(plan.articles[2:])}.html"
            plan.child_placement[name] = where
            self._plans[name].parent = parent
            profile = self._profiles[name]
            if profile.crawlable and profile.role is not HostRole.CALENDAR:
                parents.append(name)
        for name, plan in self._plans.items():
            for child in plan.child_placement:
                if self._profiles[child].role is not HostRole.CALENDAR:
                    status = 301 if self._profiles[child].index % 2 == 0 else 302
                    plan.out_redirect = (child, status)
                    self._plans[child].landings_from += (name,)
                    break
        return seeds

    def _register_site_paths(self, plan: _HostPlan) -> None:
        """A regular host's HTML pages, pages_per_host of them: its home, three listings,
        its items and the _FEATURE_PAGES."""
        paths = plan.paths
        paths["/"] = "home"
        for section in ("articles", "products", "forum"):
            paths[f"/{section}/"] = "listing"
        for slug in plan.articles:
            paths[f"/articles/{slug}.html"] = "article"
        for pid in plan.products:
            paths[f"/products/view?id={pid}&lang=en"] = "product"
        for tid in plan.threads:
            paths[f"/forum/thread-{tid}/"] = "thread"
            if tid in plan.threads_with_page2:
                paths[f"/forum/thread-{tid}/?page=2"] = "thread"
        # The _FEATURE_PAGES HTML pages:
        paths["/about/imprint.html"] = "imprint"
        paths["/about/partners.html"] = "partners"
        paths["/private/open/guide.html"] = "guide"
        paths["/private/members.html"] = "members"
        paths["/a=b/settings.html"] = "settings"
        paths[f"/search?q={plan.search_word}"] = "search"
        paths["/search?page=2"] = "search"
        paths["/trending.html"] = "trending"
        paths[f"/print/articles/{plan.print_article}.html"] = "print"
        if plan.profile.index % 2 == 0:
            paths[f"/archive/{plan.old_slug}.html"] = "archive"
        else:
            paths[f"/daily/{plan.daily_date}.html"] = "daily"

    def _register_extra_paths(self, plan: _HostPlan) -> None:
        """A regular host's paths on top of pages_per_host: non-HTML resources, redirects, a
        dead link, landing pages, pages no crawler may reach, and stories."""
        paths = plan.paths
        index = plan.profile.index
        rid = plan.resource_id
        paths[f"/files/report-{rid}.pdf"] = "pdf"
        paths[f"/files/report-{rid}.pdf?download=1"] = "pdf"
        paths[f"/images/chart-{rid}.png"] = "png"
        paths[f"/api/items/{rid}.json"] = "json"
        paths["/articles/retired-story.html"] = "gone"
        if index % 2 == 0:
            paths["/home"] = "redirect"
            paths[f"/old/{plan.old_slug}"] = "redirect"
            if index % 4 == 0:
                paths[f"/old-archive/{plan.old_slug}"] = "redirect"
        else:
            paths["/go/today"] = "redirect"
            if index % 4 == 3:
                paths["/go/today-v2"] = "redirect"
        if plan.out_redirect is not None:
            paths[f"/out/{plan.out_redirect[0].removesuffix(TEST_TLD)}"] = "redirect"
        for source in plan.landings_from:
            paths[f"/landing/from-{source.removesuffix(TEST_TLD)}.html"] = "landing"
        # Reachable only through rel=nofollow or a meta-nofollow page: never requested.
        paths["/members/login"] = "hidden"
        paths["/members/join"] = "hidden"
        for word in self._partner_words(plan):
            paths[f"/partners/{word}.html"] = "hidden"
        if plan.stories:  # WebSpec.faults only, and last: the other pages keep their charsets
            near, first, second = plan.stories
            for slug in (near, f"{near}-updated", first, second):
                paths[f"/stories/{slug}.html"] = "story"

    def _partner_words(self, plan: _HostPlan) -> tuple[str, str]:
        rng = _rng(self.spec.seed, plan.profile.name, "partners")
        first, second = rng.sample(_NOUNS, 2)
        return first, second

    def _children_links(self, w: _LinkWriter, plan: _HostPlan, path: str) -> list[Link]:
        links = []
        for child, where in plan.child_placement.items():
            if where == path:
                links.append(w.to(child, "/", f"Visit {child}", area="aside"))
                if plan.out_redirect is not None and plan.out_redirect[0] == child:
                    slug = child.removesuffix(TEST_TLD)
                    links.append(w.to(w.host, f"/out/{slug}", f"Our friends at {child}",
                                      area="aside"))
        return links

    def _page_home(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        # Relative links on some home pages resolve against <base href>, not the page's URL.
        base = self.url(host, "/articles/") if plan.profile.index % 3 == 0 else None
        w = self._writer(plan, path, base)
        links = self._nav(w)
        for slug in plan.featured_articles:
            links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
        links.append(w.to(host, self._product_path(plan.products[0]), "Product of the week"))
        links.append(w.to(host, "/trending.html", "Trending now"))
        links.append(w.to(host, f"/search?q={plan.search_word}", f"Search: {plan.search_word}"))
        links.append(w.to(host, "/search?page=2", "More search results"))
        links.append(w.to(host, "/private/open/guide.html", "Visitor guide"))
        links.append(w.to(host, "/private/members.html", "Members area"))
        links.append(w.to(host, "/a=b/settings.html", "Settings"))
        links.append(w.to(host, "/about/partners.html", "Our partners"))
        if plan.profile.index % 2 == 0:
            links.append(w.to(host, "/home", "Start page"))
            links.append(w.to(host, f"/old/{plan.old_slug}", "From the old site"))
        else:
            links.append(w.to(host, "/go/today", "Today"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._story_links(w, plan))
        links.extend(self._fault_links(w, plan))
        if plan.parent is not None:
            links.append(w.to(plan.parent, "/", f"Back to {plan.parent}", area="aside"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "home", f"Welcome to {host}", links, base_href=base)

    def _page_listing(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        section = path.strip("/")
        base = None
        if section == "forum" and plan.profile.index % 3 == 1:
            base = self.url(host, "/forum/archive/")
        w = self._writer(plan, path, base)
        links = self._nav(w)
        if section == "articles":
            for slug in plan.articles:
                links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
            links.append(w.to(host, "/articles/retired-story.html", "A retired story"))
        elif section == "products":
            for pid in plan.products:
                links.append(w.to(host, self._product_path(pid), f"Item {pid}"))
        else:
            for tid in plan.threads:
                links.append(w.to(host, f"/forum/thread-{tid}/", f"Thread {tid}"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "listing", section.capitalize(), links,
                               base_href=base)

    @staticmethod
    def _product_path(pid: int) -> str:
        return f"/products/view?id={pid}&lang=en"

    def _page_article(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        slug = path.removeprefix("/articles/").removesuffix(".html")
        is_print_original = slug == plan.print_article
        base = self.url(host, path) if is_print_original else None
        w = self._writer(plan, path, base)
        links = self._nav(w)
        featured = plan.featured_articles
        # Featured articles are first linked from home, so they may only point at pages home
        # links too; the others hang under /articles/ and may point at any article.
        pool = [s for s in (featured if slug in featured else plan.articles) if s != slug]
        rng = _rng(self.spec.seed, host, path, "related")
        for other in rng.sample(pool, min(2, len(pool))):
            links.append(w.to(host, f"/articles/{other}.html", _title_from_slug(other),
                              area="aside"))
        links.append(w.to(host, "/products/", "Browse the shop", area="aside", style="relative"))
        if slug == plan.resource_article:
            rid = plan.resource_id
            links.append(w.to(host, f"/files/report-{rid}.pdf", "Full report (PDF)"))
            links.append(w.to(host, f"/files/report-{rid}.pdf?download=1", "Download report"))
            links.append(w.to(host, f"/images/chart-{rid}.png", "Chart (PNG)"))
            links.append(w.to(host, f"/api/items/{rid}.json", "Data (JSON)"))
        if is_print_original:
            links.append(w.to(host, f"/print/articles/{slug}.html", "Print this page"))
        links.append(w.to(host, path, "Comments", fragment="comments"))
        links.extend(self._children_links(w, plan, path))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", _title_from_slug(slug), links,
                               base_href=base)

    def _page_print(self, plan: _HostPlan, path: str) -> _Page:
        original = path.removeprefix("/print")
        page = self._materialise(plan.profile.name, original)
        assert page is not None
        # Byte-identical to the original: <base href> and absolute targets keep links equal.
        return _Page(path=path, template=page.template, title=page.title, links=page.links,
                     base_href=page.base_href, canonical=page.canonical, charset=page.charset,
                     copy_of=original)

    def _page_product(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        pid = int(re.search(r"id=(\d+)", path)[1])  # type: ignore[index]
        w = self._writer(plan, path)
        links = self._nav(w)
        pool = [p for p in plan.products if p != pid]
        if pid == plan.products[0]:
            pool = []  # featured on home: its siblings hang under /products/, not above it
        for other in pool[:3]:
            links.append(w.to(host, self._product_path(other), f"Item {other}", area="aside",
                              fragment="reviews" if other % 2 else None))
        links.append(w.to(host, "/forum/", "Ask the forum", area="aside", style="relative"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "product", f"Item {pid}", links)

    def _page_thread(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        tid = int(re.search(r"thread-(\d+)", path)[1])  # type: ignore[index]
        w = self._writer(plan, path)
        links = self._nav(w)
        if path.endswith("?page=2"):
            links.append(w.to(host, f"/forum/thread-{tid}/", "Page 1", style="relative"))
        else:
            if tid in plan.threads_with_page2:
                links.append(w.to(host, f"/forum/thread-{tid}/?page=2", "Page 2"))
            for other in plan.threads:
                if other != tid and abs(other - tid) == 1:
                    links.append(w.to(host, f"/forum/thread-{other}/", f"Thread {other}",
                                      area="aside"))
        links.extend(self._footer(w, plan))
        title = f"Thread {tid}" + (" (page 2)" if path.endswith("?page=2") else "")
        return self._html_page(plan, path, "thread", title, links)

    def _simple_article(self, plan: _HostPlan, path: str, title: str, *,
                        extra: Iterable[tuple[str, str]] = (), nav: bool = True,
                        **page: object) -> _Page:
        w = self._writer(plan, path)
        links = self._nav(w) if nav else [w.to(w.host, "/", "Home", area="nav")]
        links.extend(w.to(w.host, target, text) for target, text in extra)
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "article", title, links, **page)

    def _page_imprint(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Imprint", meta_robots="noindex")

    def _page_partners(self, plan: _HostPlan, path: str) -> _Page:
        words = self._partner_words(plan)
        return self._simple_article(
            plan, path, "Our partners", meta_robots="nofollow",
            extra=[(f"/partners/{word}.html", f"The {word} people") for word in words])

    def _page_guide(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Visitor guide")

    def _page_members(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Members area")

    def _page_settings(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Settings")

    def _page_trending(self, plan: _HostPlan, path: str) -> _Page:
        page = self._simple_article(plan, path, "Trending now")
        first = 429 if plan.profile.index % 2 == 0 else 503
        return replace(page, first_status=first)

    def _page_archive(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, f"Archive: {_title_from_slug(plan.old_slug)}")

    def _page_daily(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, f"Daily digest {plan.daily_date}")

    def _page_search(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        w = self._writer(plan, path)
        links = self._nav(w)
        # Search results point at featured pages only: those are first linked from home.
        for slug in plan.featured_articles:
            links.append(w.to(host, f"/articles/{slug}.html", _title_from_slug(slug)))
        links.append(w.to(host, self._product_path(plan.products[0]), "Product of the week"))
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "listing", "Search results", links)

    def _page_landing(self, plan: _HostPlan, path: str) -> _Page:
        source = path.removeprefix("/landing/from-").removesuffix(".html") + TEST_TLD
        w = self._writer(plan, path)
        # A landing page is entered from another host, not through this host's home: it may
        # link this host's home (linked first by the same page that led here) but nothing
        # that hangs below that home.
        links = [w.to(w.host, "/", "Home", area="nav"),
                 w.to(source, "/", f"Back to {source}", area="aside")]
        links.extend(self._footer(w, plan))
        return self._html_page(plan, path, "landing", f"Welcome, visitor from {source}", links)

    def _page_hidden(self, plan: _HostPlan, path: str) -> _Page:
        return self._simple_article(plan, path, "Not for crawlers")

    def _page_pdf(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="application/pdf")

    def _page_png(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="image/png")

    def _page_json(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="resource", media_type="application/json")

    def _page_gone(self, plan: _HostPlan, path: str) -> _Page:
        return _Page(path=path, template="missing", status=404)

    def _page_redirect(self, plan: _HostPlan, path: str) -> _Page:
        host = plan.profile.name
        origin = self.origin(host)
        if path == "/home":
            return _redirect(path, 301, origin + "/", self.url(host, "/"))
        if path.startswith("/old/"):
            if plan.profile.index % 4 == 0:
                target = f"/old-archive/{plan.old_slug}"
                return _redirect(path, 301, target, self.url(host, target))
            target = f"/archive/{plan.old_slug}.html"
            return _redirect(path, 301, target, self.url(host, target))
        if path.startswith("/old-archive/"):
            target = f"/archive/{plan.old_slug}.html"
            return _redirect(path, 301, origin + target, self.url(host, target))
        daily = f"/daily/{plan.daily_date}.html"
        if path == "/go/today":
            if plan.profile.index % 4 == 3:
                return _redirect(path, 302, origin + "/go/today-v2",
                                 self.url(host, "/go/today-v2"))
            return _redirect(path, 302, origin + daily, self.url(host, daily))
        if path == "/go/today-v2":
            return _redirect(path, 301, daily, self.url(host, daily))
        assert plan.out_redirect is not None
        child, status = plan.out_redirect
        landing = f"/landing/from-{host.removesuffix(TEST_TLD)}.html"
        return _redirect(path, status, self.url(child, landing), self.url(child, landing))
