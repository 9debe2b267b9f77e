"""The records a web is built from and answers with: a host's plan, a page, a link as written,
an HTTP answer, and what a correct crawl does with one URL."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.records import header_value
from testweb.web.spec import HostProfile, PageFault


@dataclass(frozen=True)
class Response:
    """One HTTP answer. delay_before: seconds the server waits before sending it.

    fault: how the server breaks the answer instead of sending it whole: "reset" (close the
    connection with a reset, status 0), "bad-status-line" (send `body` raw, status 0) or
    "stall" (send the head and half the body, wait stall_seconds, close).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    delay_before: float = 0.0
    fault: str = ""
    stall_seconds: float = 0.0

    def header(self, name: str) -> str | None:
        return header_value(self.headers, name)


@dataclass(frozen=True)
class Expected:
    """What a correct crawl does with one accepted URL.

    requests: HTTP requests the crawler must send for it (robots.txt not counted).
    same_content_as: for byte-identical copies (print pages), the URL of the original; content
    dedup may store either one as a duplicate of the other.
    reason: a phrase the row's reason must contain (case-insensitively); None: any reason.
    truncated: the stored body is the first max_body_bytes bytes of the decoded body.
    """

    url: str
    host: str
    depth: int
    state: str
    requests: int
    http_status: int | None = None
    same_content_as: str | None = None
    reason: str | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Link:
    """An <a href> as written in a page, and the canonical URL it resolves to."""

    href: str
    target: str
    text: str
    area: str = "main"  # nav | main | aside | footer: where the template puts it
    rel: str = ""

    @property
    def followed(self) -> bool:
        return "nofollow" not in self.rel.lower().split()


@dataclass
class _HostPlan:
    profile: HostProfile
    parent: str | None = None
    articles: tuple[str, ...] = ()
    products: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    threads_with_page2: frozenset[int] = frozenset()
    search_word: str = ""
    old_slug: str = ""
    daily_date: str = ""
    # child host -> path of the page on this host that links its home first
    child_placement: dict[str, str] = field(default_factory=dict)
    out_redirect: tuple[str, int] | None = None  # (child host, 301 or 302)
    landings_from: tuple[str, ...] = ()  # hosts whose /out/ redirect lands here
    paths: dict[str, str] = field(default_factory=dict)  # path_and_query -> page kind
    fault_links: tuple[tuple[str, str], ...] = ()  # (fault host, path) its home links
    stories: tuple[str, ...] = ()  # slugs: a near-duplicate pair's, then a look-alike pair's

    @property
    def featured_articles(self) -> tuple[str, ...]:
        return self.articles[:2]

    @property
    def print_article(self) -> str:
        return self.articles[2]

    @property
    def resource_article(self) -> str:
        return self.articles[3] if len(self.articles) > 3 else self.articles[2]

    @property
    def resource_id(self) -> int:
        return self.profile.index * 10 + 7


@dataclass(frozen=True, slots=True)
class _Page:
    path: str
    template: str  # home listing article product thread calendar landing search | special
    title: str = ""
    links: tuple[Link, ...] = ()
    base_href: str | None = None
    meta_robots: str | None = None
    canonical: str | None = None
    charset: str = "utf-8"
    copy_of: str | None = None  # this path serves the bytes of that path
    status: int = 200
    location: str = ""  # Location header as sent
    location_target: str = ""  # and the canonical URL it resolves to
    first_status: int = 0  # 429 or 503 on the first request, 200 afterwards
    media_type: str = "text/html"
    fault: PageFault | None = None
    error_status: int = 0  # PageFault.ERROR_ONCE: the status of the first answer
    prose_of: str | None = None  # the path whose prose (and native sentence) it shares
    dateline: str = ""  # stories: the date under the title
    text_of: str | None = None  # a near copy of that path's article (and its key phrase)...
    edits: int = 0  # ...with this many of its words changed
    paragraphs: int = 0  # of the article (0: as many as its template draws)

    @property
    def is_html(self) -> bool:
        return self.media_type == "text/html" and self.status == 200

    @property
    def follows_links(self) -> bool:
        return "nofollow" not in (self.meta_robots or "").replace(",", " ").lower().split()

    @property
    def indexable(self) -> bool:
        return "noindex" not in (self.meta_robots or "").replace(",", " ").lower().split()


def _redirect(path: str, status: int, location: str, target: str) -> _Page:
    return _Page(path=path, template="redirect", status=status, location=location,
                 location_target=target)
