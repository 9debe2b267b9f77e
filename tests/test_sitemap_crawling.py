"""Crawling sitemaps (--sitemaps), as pure decisions: a host hands on its robots.txt's Sitemap
lines once per answer, a sitemap document keeps its mark through the queue, overflow and
fetch, is fetched as a page is (robots rules, budgets), and its body becomes one batch.
"""

from __future__ import annotations

import dataclasses
import gzip

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.fleet_host import CrawlTerms, FleetHostState
from pipeline.core.host_queue import HostQueue, encode_entries
from pipeline.core.pages import StoredResponse, judge_response, judge_sitemap
from pipeline.core.politeness import FetchReport, HostPolicy, HostState, LeaseKind
from pipeline.core.records import (
    BatchKind,
    FetchResult,
    FrontierEntry,
    PageState,
    RecordPointer,
)
from pipeline.core.sitemaps import MAX_SITEMAP_URLS
from pipeline.core.urls import url_hash
from pipeline.io.host_overflow import decode_chunk, encode_chunk

HOST = "a.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                    sitemaps=True)
ROBOTS = (b"User-agent: *\nDisallow: /private/\n"
          b"Sitemap: http://a.test/sitemap.xml\nSitemap: http://b.test/elsewhere.xml\n"
          b"Sitemap: http://a.test/sitemap.xml\n")
SITEMAP_LINES = ("http://a.test/sitemap.xml", "http://b.test/elsewhere.xml")


def urls(*paths: str) -> list[tuple[str, int, str | None]]:
    return [(f"http://{HOST}/{p}", url_hash(f"http://{HOST}/{p}"), None) for p in paths]


def host_after_robots(policy: HostPolicy, body: bytes = ROBOTS, at: float = 0.0) -> HostState:
    state = HostState(host=HOST)
    state.offer(urls("a", "b"), 0, policy)
    decision = state.next_action(at, policy)
    assert decision.fetch is not None and decision.fetch.lease.kind is LeaseKind.ROBOTS
    assert not decision.sitemaps  # no rules yet: nothing to read them from
    state.complete(decision.fetch.lease.lease_id, FetchReport(status=200, body=body), at,
                   policy)
    return state


# ------------------------------------------------------------------- from robots.txt
def test_a_crawl_with_sitemaps_hands_on_the_sitemap_lines_of_each_answer_once():
    state = host_after_robots(POLICY)
    first = state.next_action(1.0, POLICY)
    # With the first request after robots.txt: each line once, other hosts' too (their own
    # key fetches them, and scope decides there).
    assert first.fetch is not None and first.sitemaps == SITEMAP_LINES
    state.complete(first.fetch.lease.lease_id, FetchReport(status=200), 1.0, POLICY)
    second = state.next_action(2.0, POLICY)
    assert second.fetch is not None and second.sitemaps == ()
    state.complete(second.fetch.lease.lease_id, FetchReport(status=200), 2.0, POLICY)
    # A new answer (the old one expired) is read again; the seen-set drops what is queued.
    later = state.gate.rules.expires_at + 1
    state.offer(urls("c"), 0, POLICY)
    renewed = state.next_action(later, POLICY)
    assert renewed.fetch is not None and renewed.fetch.lease.kind is LeaseKind.ROBOTS
    state.complete(renewed.fetch.lease.lease_id, FetchReport(status=200, body=ROBOTS), later,
                   POLICY)
    assert state.next_action(later + 1, POLICY).sitemaps == SITEMAP_LINES


def test_a_crawl_without_sitemaps_hands_on_none():
    policy = dataclasses.replace(POLICY, sitemaps=False)
    state = host_after_robots(policy)
    for at in (1.0, 2.0):
        decision = state.next_action(at, policy)
        assert decision.sitemaps == ()
        if decision.fetch is not None:
            state.complete(decision.fetch.lease.lease_id, FetchReport(status=200), at, policy)


def test_a_robots_txt_without_an_answer_lists_no_sitemap_and_a_later_answer_does():
    state = host_after_robots(POLICY, body=b"")
    assert state.next_action(1.0, POLICY).sitemaps == ()
    unreachable = HostState(host=HOST)
    unreachable.offer(urls("a"), 0, POLICY)
    robots = unreachable.next_action(0.0, POLICY).fetch
    assert robots is not None
    unreachable.complete(robots.lease.lease_id, FetchReport(status=503), 0.0, POLICY)
    assert unreachable.next_action(1.0, POLICY).sitemaps == ()


def test_every_crawl_on_a_host_that_reads_sitemaps_gets_the_lines_of_the_shared_rules():
    fleet = FleetHostState(host=HOST)
    other = dataclasses.replace(POLICY, user_agent="otherbot")
    fleet.offer("one", urls("a"), 0, POLICY)
    fleet.offer("two", urls("b"), 0, other)
    terms = {"one": CrawlTerms(POLICY), "two": CrawlTerms(other)}
    robots = fleet.next_action(0.0, terms)
    crawl_id, order = robots.fetch
    fleet.complete(order.lease.lease_id, FetchReport(status=200, body=ROBOTS), 0.0,
                   POLICY if crawl_id == "one" else other)
    sent: list[tuple[str, tuple[str, ...]]] = []
    # Handed on at the next firing, even one at which no request is due yet.
    early = fleet.next_action(0.5, terms)
    assert early.fetch is None and {c for c, d in early.decisions if d.sitemaps} == {"one",
                                                                                     "two"}
    sent += [(c, d.sitemaps) for c, d in early.decisions if d.sitemaps]
    for at in (1.0, 2.0, 3.0):
        decision = fleet.next_action(at, terms)
        sent += [(c, d.sitemaps) for c, d in decision.decisions if d.sitemaps]
        if decision.fetch is not None:
            fleet.complete(decision.fetch[1].lease.lease_id, FetchReport(status=200), at,
                           POLICY)
    assert sorted(sent) == [("one", SITEMAP_LINES), ("two", SITEMAP_LINES)]  # once each


# -------------------------------------------------------------------- the mark
def test_a_sitemap_document_is_queued_marked_and_fetched_as_a_page_under_robots_and_budget():
    state = host_after_robots(POLICY)
    accepted, outcomes, _ = state.offer(urls("sitemap.xml", "private/map.xml"), 1, POLICY,
                                        sitemap=True)
    assert [e.sitemap for e in accepted] == [True, True] and not outcomes
    # A URL the seen-set already has is not a second sitemap document.
    assert state.offer(urls("sitemap.xml"), 1, POLICY, sitemap=True)[0] == []
    claims = []
    fetched = []
    at = 1.0
    disallowed = []
    while state.backlog.queue:
        decision = state.next_action(at, POLICY, claim_page=lambda _url: claims.append(1) or True)
        disallowed += [o.entry.url for o in decision.outcomes
                       if o.state is PageState.DISALLOWED]
        if decision.fetch is not None:
            fetched.append(decision.fetch.lease.entry)
            done = state.complete(decision.fetch.lease.lease_id, FetchReport(status=200), at,
                                  POLICY)
            assert done.page_done == decision.fetch.lease.entry
        at += 1.0
    assert [(e.url, e.sitemap) for e in fetched] == [
        ("http://a.test/a", False), ("http://a.test/b", False),
        ("http://a.test/sitemap.xml", True)]
    assert disallowed == ["http://a.test/private/map.xml"]
    # Each sitemap fetched claimed a page of the crawl's budget, as each page did.
    assert len(claims) == len(fetched)


def test_the_mark_survives_the_stored_queue_its_pickle_and_overflow_chunks():
    page = FrontierEntry("http://a.test/p", 1, 1, 0, 2)
    sitemap = FrontierEntry("http://a.test/s.xml", 2, 1, 1, 3, sitemap=True)
    queue = HostQueue([page, sitemap])
    stored = queue.stored()
    back = HostQueue.restored(stored.meta, lambda: stored.data)
    assert list(back) == [page, sitemap]
    assert decode_chunk(encode_chunk((page, sitemap))) == (page, sitemap)
    # A page's bytes are what they were before the mark existed: stored queues read the same.
    assert encode_entries([page])[16:20] == (2).to_bytes(4, "little")
    assert b"true" not in encode_chunk((page,))


def test_an_entry_pickled_before_the_mark_existed_reads_back_as_a_page(monkeypatch):
    """A lease's entry is pickled in a host's stored state: what the release before wrote
    (five values) must read back, not fail at its first use."""
    import pickle

    entry = FrontierEntry("http://a.test/p", 1, 2, 1, 0)
    monkeypatch.setattr(FrontierEntry, "__getstate__", lambda self: [
        self.url, self.url_hash, self.depth, self.attempt, self.redirect_hops])
    older = pickle.dumps(entry)
    monkeypatch.undo()
    assert pickle.loads(older) == entry and pickle.loads(older).sitemap is False
    marked = dataclasses.replace(entry, sitemap=True)
    assert pickle.loads(pickle.dumps(marked)) == marked


# ------------------------------------------------------------ parse to batches
def fetched(body: bytes, content_type: str = "application/xml", status: int = 200,
            url: str = "http://a.test/sitemap.xml", **headers: str) -> StoredResponse:
    result = FetchResult(
        crawl_id="c", url=url, url_hash=url_hash(url), host=HOST, depth=1, attempt=0,
        fetched_at=1.0, elapsed=0.1, http_status=status,
        headers=(("Content-Type", content_type), *headers.items()), body=body, sitemap=True)
    return StoredResponse(result, RecordPointer("warc", 0, 10))


def urlset(*locs: str) -> bytes:
    return (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + b"".join(b"<url><loc>%s</loc></url>" % loc.encode() for loc in locs)
            + b"</urlset>")


def test_a_url_set_becomes_one_sitemap_batch_of_its_pages_at_the_sitemap_s_depth():
    page, tally = judge_sitemap(fetched(urlset("http://a.test/x", "http://b.test/y",
                                               "http://a.test/x", "ftp://a.test/z")))
    assert (page.row.state, page.row.reason, page.row.links) == (
        PageState.FETCHED, "sitemap: 3 URLs", 2)
    assert page.links is not None and page.links.kind is BatchKind.SITEMAP
    assert (page.links.urls, page.links.depth) == (("http://a.test/x", "http://b.test/y"), 1)
    assert page.text is None  # nothing for content dedup
    assert (tally.listed, tally.cut, tally.failed) == (3, 0, False)
    # judge_response, which every store path calls, reads it the same way.
    assert judge_response(fetched(urlset("http://a.test/x"))).links.kind is BatchKind.SITEMAP


def test_an_index_sends_its_sitemaps_back_as_documents_and_never_itself():
    index = (b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
             b"<sitemap><loc>http://a.test/sitemap.xml</loc></sitemap>"
             b"<sitemap><loc>http://a.test/more.xml.gz</loc></sitemap></sitemapindex>")
    page, _ = judge_sitemap(fetched(gzip.compress(index), "application/gzip"))
    assert page.links is not None and page.links.kind is BatchKind.SITEMAP_DOCUMENTS
    assert page.links.urls == ("http://a.test/more.xml.gz",)
    assert page.row.reason == "sitemap: 2 sitemaps"


def test_urls_past_the_protocol_limit_are_cut_and_counted():
    locs = [f"http://a.test/{n}" for n in range(MAX_SITEMAP_URLS + 7)]
    page, tally = judge_sitemap(fetched(urlset(*locs)))
    assert (tally.listed, tally.cut) == (MAX_SITEMAP_URLS, 7)
    assert page.row.state is PageState.FETCHED and "7 cut past 50000" in page.row.reason
    assert len(page.links.urls) == MAX_SITEMAP_URLS


def test_a_broken_sitemap_fails_with_why_and_leads_nowhere():
    cases = {
        "invalid XML": fetched(b"<urlset><url><loc>http://a.test/x</loc></url", ),
        "content type 'text/html' is not a sitemap's": fetched(b"<html></html>", "text/html"),
        "declares XML entities": fetched(b'<!DOCTYPE u [<!ENTITY a "b">]><urlset/>'),
        "HTTP 404": fetched(b"gone", status=404),
    }
    for why, stored in cases.items():
        page, tally = judge_sitemap(stored)
        assert page.row.state is PageState.FAILED and page.row.reason.startswith(
            f"sitemap: {why}"), page.row.reason
        assert page.links is None and tally.failed and tally.listed == 0


def test_a_redirected_sitemap_sends_its_target_back_as_a_sitemap_document():
    page, tally = judge_sitemap(fetched(b"", status=301, Location="/new-sitemap.xml"))
    assert (page.row.state, page.row.reason) == (
        PageState.REDIRECTED, "sitemap: HTTP 301 to http://a.test/new-sitemap.xml")
    assert page.links.kind is BatchKind.SITEMAP_DOCUMENTS and page.links.redirect_hops == 1
    assert not tally.failed


def test_a_sitemap_cut_by_the_body_limit_keeps_the_urls_before_the_cut():
    body = urlset("http://a.test/x", "http://a.test/y")[:-40]
    stored = fetched(body)
    stored = dataclasses.replace(stored, result=dataclasses.replace(stored.result,
                                                                    truncated=True))
    page, _ = judge_sitemap(stored)
    assert page.row.state is PageState.FETCHED and page.links.urls == ("http://a.test/x",)
    assert page.row.reason.endswith(f"body truncated at {len(body):,} bytes")


# ---------------------------------------------------------------- the crawl's balance
class _Publisher:
    def publish(self, topic: str, data: bytes, **attributes: str):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result("id")
        return future


def test_sitemap_batches_count_on_the_far_side_of_the_link_batches_they_were_emitted_as():
    """The store counts every batch it makes (link_batches_emitted), and the scheduler each
    batch of sitemap documents from robots.txt: publishing must count each of them as
    batches_published_links, or the crawl's balance never settles (or settles early)."""
    from pipeline.core.records import FrontierBatch, HostSignal, HostSignalKind
    from pipeline.io.bigtable import BigtableConfig
    from pipeline.transforms.frontier import PublishFn, named_message

    fn = PublishFn("projects/p/topics/t", counts=BigtableConfig(project="p", instance="i"))
    fn._publisher = _Publisher()
    fn.start_bundle()
    for kind in (BatchKind.LINKS, BatchKind.SITEMAP, BatchKind.SITEMAP_DOCUMENTS,
                 BatchKind.SEEDS):
        fn.process(named_message(FrontierBatch("c", 1, ("http://a.test/",), kind=kind)))
    fn.process(named_message(HostSignal("c", "http://a.test/", HostSignalKind.THROTTLE)))
    (out,) = fn.finish_bundle()  # the bundle's counts for crawl c's record
    key, counted = out.value.value
    assert key.startswith("c/")
    assert counted == {"batches_published": 5, "batches_published_links": 3}


# ------------------------------------------------------------- the host scheduler
def test_the_scheduler_sends_robots_sitemaps_round_the_frontier_and_fetches_them_as_its_own(
        bigtable_config, bigtable_tables):
    """HostSchedulerFn driven directly (tests/harness_hosts.py): robots.txt's Sitemap lines
    leave on the 'robots' output as one sitemap_documents batch, counted as an emitted link
    batch; back through the frontier, a.test's sitemap is a request of a.test a full delay
    after its last one, its fetched result marked; b.test's goes to b.test's key."""
    from pipeline.io.crawls import create_crawl
    from pipeline.transforms.tags import Tag
    from tests.conftest import fresh_name
    from tests.harness_hosts import TEXT, Hosts, tagged

    crawl_id = fresh_name("sitemaps")
    create_crawl(bigtable_tables, crawl_id, seeds=(),
                 limits=CrawlLimits(max_pages=100, sitemaps=True), at=0.0)
    hosts = Hosts(bigtable_config)
    try:
        hosts.offer(crawl_id, "http://a.test/a")
        hosts.fire("a.test", 0.0)
        hosts.pool.finish(0, body=ROBOTS, headers=TEXT)
        out = hosts.fire("a.test", 0.1)
        (batch,) = tagged(out, Tag.ROBOTS)
        assert (batch.kind, batch.urls, batch.depth) == (
            BatchKind.SITEMAP_DOCUMENTS, SITEMAP_LINES, 1)
        hosts.fire("a.test", 1.0)  # the page
        assert [url for url, _ in hosts.started("a.test")] == [
            "http://a.test/robots.txt", "http://a.test/a"]
        hosts.pool.finish(1)
        hosts.fire("a.test", 1.1)
        hosts.publish(batch)
        assert [url for url, _ in hosts.started("b.test")] == []  # b.test's own key: queued
        assert hosts.state("b.test").crawls[crawl_id].backlog.queue[0].sitemap
        hosts.fire("a.test", 1.5)
        assert len(hosts.started("a.test")) == 2  # a delay after the page's exchange
        hosts.fire("a.test", 2.0)
        assert hosts.started("a.test")[-1] == ("http://a.test/sitemap.xml", 2.0)
        hosts.pool.finish(2, body=urlset("http://a.test/x"),
                          headers=(("Content-Type", "application/xml"),))
        (result,) = [o for o in hosts.fire("a.test", 2.1) if isinstance(o, FetchResult)]
        assert result.sitemap and result.url == "http://a.test/sitemap.xml"
        assert hosts.counted()[crawl_id]["link_batches_emitted"] == 1
    finally:
        hosts.close()
