"""Pages that repeat other pages: print copies on regular hosts, the copies host's wire
article with its exact and near copies, and stories (a near-duplicate pair and a look-alike
pair) on a few regular hosts; and which of them a crawl must pair up."""

from __future__ import annotations

from dataclasses import replace

from testweb.web.faults import _WIRE_ORIGINAL, _WIRE_PARAGRAPHS
from testweb.web.hosts import WebBase
from testweb.web.links import _LinkWriter
from testweb.web.model import Link, _HostPlan, _Page
from testweb.web.prose import _ADJECTIVES, _NOUNS, _VERBS, _fault_title, _rng, _title_from_slug
from testweb.web.spec import FaultHost, HostRole

# Regular hosts (allow-all, not-found, empty and allow-all robots) that carry stories.
_STORY_HOSTS = (0, 4, 9, 13)


class Duplicates(WebBase):
    """Exact copies, near copies and look-alikes, and the pages that carry them."""

    def exact_copies(self) -> dict[str, str]:
        """Pages that serve another page's bytes, each mapped to that original (print pages
        and the copies host's copies): content dedup stores one of each group."""
        copies = {}
        for host, plan in self._plans.items():
            for path, kind in plan.paths.items():
                if kind in ("print", "copies-copy"):
                    page = self._lookup(host, path)
                    assert page is not None and page.copy_of is not None
                    copies[self.url(host, path)] = self.url(host, page.copy_of)
        return copies

    def near_copies(self) -> dict[str, str]:
        """The copies host's near copies, each mapped to the article it repeats with one or
        two words changed: a 64-bit simhash of their text is within 3 bits of the original's
        (WebSpec.faults only)."""
        copies = {}
        for host, plan in self._plans.items():
            if plan.profile.fault is FaultHost.COPIES:
                for path in plan.paths:
                    page = self._lookup(host, path)
                    if page is not None and page.text_of is not None:
                        copies[self.url(host, path)] = self.url(host, page.text_of)
        return copies

    def near_duplicate_pairs(self) -> list[tuple[str, str]]:
        """Pairs of pages on regular hosts that carry the same story, a date line and a
        sentence apart: what a near-duplicate detector should find (WebSpec.faults only)."""
        return [(self.url(host, f"/stories/{plan.stories[0]}.html"),
                 self.url(host, f"/stories/{plan.stories[0]}-updated.html"))
                for host, plan in self._plans.items() if plan.stories]

    def look_alike_pairs(self) -> list[tuple[str, str]]:
        """Pairs of different stories on one template, sharing a host, a date line and an
        introduction: NOT near-duplicates (a detector that pairs them loses precision)."""
        return [(self.url(host, f"/stories/{plan.stories[1]}.html"),
                 self.url(host, f"/stories/{plan.stories[2]}.html"))
                for host, plan in self._plans.items() if plan.stories]

    def _same_content_as(self, host: str, path: str) -> str | None:
        plan = self._plans[host]
        if plan.profile.fault is FaultHost.COPIES:
            # One chain per copied article: the original names its first copy, every exact
            # copy names the original (the auditor joins them into one group).
            if path == _WIRE_ORIGINAL:
                return self.url(host, "/wire/copy-1.html")
            return self.url(host, _WIRE_ORIGINAL) if path.startswith("/wire/copy-") else None
        if plan.profile.role in (HostRole.CALENDAR, HostRole.FAULT, HostRole.ROBOTS,
                                 HostRole.SITEMAPS) or not plan.articles:
            return None  # hosts without articles have no print copy of one
        original = f"/articles/{plan.print_article}.html"
        if path == original:
            return self.url(host, f"/print/articles/{plan.print_article}.html")
        if path == f"/print/articles/{plan.print_article}.html":
            return self.url(host, original)
        return None

    def _plan_stories(self) -> None:
        """Stories (a near-duplicate pair and a look-alike pair) on a few regular hosts."""
        for index in _STORY_HOSTS:
            if index >= self.spec.hosts:
                continue
            plan = self._plans[self._site(index)]
            rng = _rng(self.spec.seed, plan.profile.name, "stories")
            slugs: list[str] = []
            while len(slugs) < 3:
                slug = "-".join((rng.choice(_ADJECTIVES), rng.choice(_NOUNS), rng.choice(_VERBS)))
                if slug not in slugs:
                    slugs.append(slug)
            plan.stories = tuple(slugs)

    def _story_links(self, w: _LinkWriter, plan: _HostPlan) -> list[Link]:
        if not plan.stories:
            return []
        near, first, second = plan.stories
        return [
            w.to(w.host, f"/stories/{near}.html", _title_from_slug(near)),
            w.to(w.host, f"/stories/{near}-updated.html", f"{_title_from_slug(near)} (updated)"),
            w.to(w.host, f"/stories/{first}.html", _title_from_slug(first)),
            w.to(w.host, f"/stories/{second}.html", _title_from_slug(second)),
        ]

    def _page_story(self, plan: _HostPlan, path: str) -> _Page:
        slug = path.removeprefix("/stories/").removesuffix(".html")
        near = plan.stories[0]
        story = near if slug == f"{near}-updated" else slug
        w = self._writer(plan, path)
        links = self._nav(w) + self._footer(w, plan)
        page = self._html_page(
            plan, path, "story", _title_from_slug(story), links,
            prose_of=f"/stories/{story}.html",
            dateline="updated 15 March 2026, 09:30" if story != slug else "14 March 2026")
        # Both copies of the near-duplicate story share a charset, hence a native sentence.
        return replace(page, charset="utf-8") if story == near else page

    def _page_copies_story(self, plan: _HostPlan, path: str) -> _Page:
        """The wire article, a near copy of it (/wire/edit-N: N odd, one word changed; even,
        two), or an article of its own (/wire/other-N)."""
        w = self._writer(plan, path)
        links = [w.to(w.host, "/", "Home", area="nav"), *self._footer(w, plan)]
        if path.startswith("/wire/other-"):
            title = _fault_title(path) + " " + _title_from_slug(
                "-".join(_rng(self.spec.seed, w.host, path, "title").sample(_NOUNS, 2)))
            return self._html_page(plan, path, "article", title, links,
                                   paragraphs=_WIRE_PARAGRAPHS)
        title = "Wire: " + _title_from_slug(
            "-".join(_rng(self.spec.seed, w.host, _WIRE_ORIGINAL, "title").sample(_NOUNS, 2)))
        page = self._html_page(plan, path, "article", title, links, paragraphs=_WIRE_PARAGRAPHS,
                               prose_of=_WIRE_ORIGINAL)
        if path == _WIRE_ORIGINAL:
            return page
        number = int(path.removeprefix("/wire/edit-").removesuffix(".html"))
        # Same charset as the original, hence the same non-ASCII sentence.
        return replace(page, charset=self._charset_for(plan, _WIRE_ORIGINAL),
                       text_of=_WIRE_ORIGINAL, edits=1 if number % 2 else 2)

    def _page_copies_copy(self, plan: _HostPlan, path: str) -> _Page:
        # Byte for byte the original: every copy sits in its directory, so relative links
        # resolve alike, and its canonical link names the original.
        original = self._materialise(plan.profile.name, _WIRE_ORIGINAL)
        assert original is not None
        return replace(original, path=path, copy_of=_WIRE_ORIGINAL)
