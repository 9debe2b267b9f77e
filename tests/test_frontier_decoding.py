"""The engine's Beam shell without Beam's runner: decoding every crawl's frontier messages by
host (DecodeFrontierFn), and each crawl's limits over the shared policy (crawl_policy)."""

from __future__ import annotations

from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from pipeline.core.crawl_states import CrawlLimits, CrawlState
from pipeline.core.politeness import HostPolicy
from pipeline.core.records import (
    DeadLetter,
    FrontierBatch,
    HostBatch,
    HostSeenMarks,
    HostSignal,
    HostWake,
    RecordPointer,
    RobotsAnswer,
    RobotsRequest,
    SeenMarks,
)
from pipeline.core.robots_relay import RobotsFetch, RobotsReply
from pipeline.core.urls import url_hash
from pipeline.io.crawls import Crawl
from pipeline.transforms.frontier import DecodeFrontierFn
from pipeline.transforms.schedule import crawl_policy
from pipeline.transforms.tags import Tag
from tests.harness_hosts import decode_bundle

BASE = HostPolicy(user_agent="shared/1.0", min_delay=1.0, max_crawl_delay=30.0, max_depth=None,
                  max_pages_per_host=None, bloom_capacity=400_000)


def _crawl(limits: CrawlLimits, started_at: float = 0.0) -> Crawl:
    return Crawl(id="c1", state=CrawlState.RUNNING, reason="", seeds=(), limits=limits,
                 created_at=0.0, started_at=started_at, ended_at=None, counters={})


def test_a_crawl_s_own_limits_override_the_shared_defaults():
    policy = crawl_policy(BASE, _crawl(CrawlLimits(
        max_pages=100, max_pages_per_host=10, max_depth=2, min_delay=45.0,
        user_agent="mine/2.0")))
    assert (policy.user_agent, policy.min_delay, policy.max_depth,
            policy.max_pages_per_host) == ("mine/2.0", 45.0, 2, 10)
    assert policy.max_crawl_delay == 45.0  # a floor above the cap lifts the cap
    assert policy.bloom_capacity == 40  # sized from the crawl's host budget
    assert policy.fetch_timeout == BASE.fetch_timeout
    assert policy.deadline is None
    defaults = crawl_policy(BASE, _crawl(CrawlLimits(max_pages=100)))
    assert (defaults.user_agent, defaults.min_delay, defaults.max_depth) == (
        "shared/1.0", 1.0, None)
    assert defaults.bloom_capacity == 400


def test_a_crawl_s_time_budget_is_a_deadline_from_its_last_start():
    timed = crawl_policy(BASE, _crawl(CrawlLimits(max_pages=100, max_duration_s=60.0),
                                      started_at=1000.0))
    assert timed.deadline == 1060.0


def test_every_crawl_s_messages_are_keyed_by_host_with_their_crawl():
    decode = DecodeFrontierFn()
    first = FrontierBatch("c1", 0, ("http://a.test/x", "http://b.test/y"), kind="seeds")
    second = FrontierBatch("c2", 1, ("http://A.test/z",))
    got = decode_bundle(decode, [first.to_bytes(), second.to_bytes()])
    keyed = sorted((host, crawl_id, batch.entries[0][0]) for host, (crawl_id, batch) in got)
    assert keyed == [("a.test", "c1", "http://a.test/x"), ("a.test", "c2", "http://a.test/z"),
                     ("b.test", "c1", "http://b.test/y")]
    assert all(isinstance(batch, HostBatch) for _, (_, batch) in got)
    signal = HostSignal("c2", "http://a.test/z", "throttle")
    assert decode_bundle(decode, [signal.to_bytes()]) == [("a.test", ("c2", signal))]
    wake = HostWake("c1", "b.test:8080")  # to the key of the host asleep
    assert decode_bundle(decode, [wake.to_bytes()]) == [("b.test:8080", ("c1", wake))]


def test_a_host_every_page_links_to_gets_one_offer_per_bundle_not_one_per_page():
    """A bundle of 300 pages' links, each page linking to one popular host and to a host of
    its own: the popular host's key is offered its 300 URLs once, in the order they came,
    and every other host its own URL; no URL is lost or doubled."""
    pages = [FrontierBatch("c1", 2, (f"http://popular.test/p{i}", f"http://own{i}.test/"))
             for i in range(300)]
    got = decode_bundle(DecodeFrontierFn(), [page.to_bytes() for page in pages])
    by_key: dict[str, list[HostBatch]] = {}
    for host, (crawl_id, batch) in got:
        assert crawl_id == "c1" and batch.depth == 2
        by_key.setdefault(host, []).append(batch)
    (popular,) = by_key.pop("popular.test")
    assert [url for url, _, _ in popular.entries] == [
        f"http://popular.test/p{i}" for i in range(300)]
    assert sorted(by_key) == sorted(f"own{i}.test" for i in range(300))
    assert all(len(batches) == 1 and len(batches[0].entries) == 1
               for batches in by_key.values())


def test_offers_of_other_depths_kinds_and_crawls_stay_apart_and_large_ones_leave_early():
    decode = DecodeFrontierFn(max_offer=3)
    batches = [FrontierBatch("c1", 1, ("http://a.test/1", "http://a.test/2")),
               FrontierBatch("c1", 2, ("http://a.test/3",)),
               FrontierBatch("c2", 1, ("http://a.test/4",)),
               FrontierBatch("c1", 1, ("http://a.test/5",), kind="spill"),
               FrontierBatch("c1", 1, ("http://a.test/6", "http://a.test/7"))]
    decode.start_bundle()
    early = [item for batch in batches for item in decode.process(
        batch.to_bytes(), timestamp=Timestamp(1), window=GlobalWindow())]
    # The first and last batches merge to four URLs: three leave at once, the fourth waits.
    assert [(c, b.depth, [u[-1] for u, _, _ in b.entries]) for _, (c, b) in early] == [
        ("c1", 1, ["1", "2", "6"])]
    held = [(v.value[1][0], v.value[1][1].depth, str(v.value[1][1].kind),
             [u[-1] for u, _, _ in v.value[1][1].entries]) for v in decode.finish_bundle()]
    assert held == [("c1", 1, "links", ["7"]), ("c1", 2, "links", ["3"]),
                    ("c2", 1, "links", ["4"]), ("c1", 1, "spill", ["5"])]


def test_malformed_messages_are_counted_and_dropped_not_raised():
    decode = DecodeFrontierFn()
    for payload in (b"not json", b'{"version":1,"kind":"dead_letter","crawl_id":"c1"}',
                    b'{"version":1,"kind":"no-such-kind","crawl_id":"c1"}'):
        assert decode_bundle(decode, [payload]) == []


def test_a_redriven_dead_letter_leaves_for_the_store_whatever_its_crawl():
    """A dead letter `crawler redrive` sent back goes out on 'redrive' whole (the store
    parses its stored response again), not to a host's key and not dropped."""
    decode = DecodeFrontierFn()
    letters = [DeadLetter(crawl_id, "parse", "http://a.test/x", 7, "boom", 3,
                          warc=RecordPointer("c/warc/s.warc.gz", 10, 20), depth=2,
                          fetched_at=1.5) for crawl_id in ("c1", "c2")]
    out = decode_bundle(decode, [letter.to_bytes() for letter in letters])
    assert [(o.tag, o.value) for o in out] == [(Tag.REDRIVE, letter) for letter in letters]


def test_a_resumed_crawl_s_seen_marks_are_keyed_by_host_with_their_crawl():
    """As split_by_host does: normalised, grouped by host, `issued` kept, an unreadable URL
    counted and left out."""
    decode = DecodeFrontierFn()
    issued = SeenMarks("c1", ("http://A.test/x#top", "http://b.test/y", "http://a.test/z"),
                       issued=True)
    seen = SeenMarks("c2", ("http://a.test/x", "not a url"))
    got = sorted((host, crawl_id, marks.issued, tuple(url for url, _, _ in marks.entries))
                 for marks in (issued, seen)
                 for host, (crawl_id, marks) in decode.process(marks.to_bytes()))
    assert got == [("a.test", "c1", True, ("http://a.test/x", "http://a.test/z")),
                   ("a.test", "c2", False, ("http://a.test/x",)),
                   ("b.test", "c1", True, ("http://b.test/y",))]
    ((_, (_, marks)),) = [item for item in decode.process(seen.to_bytes())]
    assert isinstance(marks, HostSeenMarks)
    assert marks.entries == (("http://a.test/x", url_hash("http://a.test/x"), None),)


def test_robots_requests_and_answers_are_keyed_by_the_host_they_are_for_with_their_crawl():
    """A request goes to the key of the host that fetches, an answer to the key of the host
    that asked, each with its crawl."""
    decode = DecodeFrontierFn()
    request = RobotsRequest("c1", "b.test:8080", "http://b.test:8080/robots.txt", "a.test",
                            "e1")
    fetch = RobotsFetch.of("http://b.test:8080/robots.txt", 200,
                           b"User-agent: *\nDisallow: /private/\n", 5.0)
    answer = RobotsAnswer.of("c2", RobotsReply("a.test", "e1", fetch))
    assert list(decode.process(request.to_bytes())) == [("b.test:8080", ("c1", request))]
    ((host, (crawl_id, decoded)),) = list(decode.process(answer.to_bytes()))
    assert (host, crawl_id, decoded) == ("a.test", "c2", answer)
    assert decoded.reply() == RobotsReply("a.test", "e1", fetch)


# --- Keyed by registered domain (--politeness-key domain) ------------------------------------
def test_with_the_domain_key_two_subdomains_urls_are_offered_together_under_their_domain():
    """Two subdomains' links (and a port of one) are one offer to their registered domain's
    key, merged over the bundle, each URL as it came; another domain keeps its own key."""
    decode = DecodeFrontierFn(politeness_key="domain")
    first = FrontierBatch("c1", 1, ("http://www.shop.test/a", "http://img.shop.test/b",
                                    "http://other.test/c"))
    second = FrontierBatch("c1", 1, ("http://img.shop.test:8080/d",))
    got = decode_bundle(decode, [first.to_bytes(), second.to_bytes()])
    offers = {key: tuple(url for url, _, _ in batch.entries)
              for key, (crawl_id, batch) in got}
    assert offers == {
        "shop.test": ("http://www.shop.test/a", "http://img.shop.test/b",
                      "http://img.shop.test:8080/d"),
        "other.test": ("http://other.test/c",)}
    assert len(got) == 2
    by_host = decode_bundle(DecodeFrontierFn(), [first.to_bytes(), second.to_bytes()])
    assert sorted(key for key, _ in by_host) == [
        "img.shop.test", "img.shop.test:8080", "other.test", "www.shop.test"]


def test_with_the_domain_key_seen_marks_signals_queries_replies_and_wakes_reach_the_domain():
    decode = DecodeFrontierFn(politeness_key="domain")
    marks = SeenMarks("c1", ("http://www.shop.test/x", "http://img.shop.test/y"))
    ((key, (_, host_marks)),) = list(decode.process(marks.to_bytes()))
    assert key == "shop.test" and len(host_marks.entries) == 2
    signal = HostSignal("c1", "http://img.shop.test/z", "throttle")
    assert list(decode.process(signal.to_bytes())) == [("shop.test", ("c1", signal))]
    request = RobotsRequest("c1", "img.shop.test:8080", "http://img.shop.test:8080/robots.txt",
                            "www.shop.test", "e1")
    assert list(decode.process(request.to_bytes())) == [("shop.test", ("c1", request))]
    fetch = RobotsFetch.of("http://img.shop.test:8080/robots.txt", 200, b"", 5.0)
    answer = RobotsAnswer.of("c1", RobotsReply("www.shop.test", "e1", fetch))
    assert list(decode.process(answer.to_bytes())) == [("shop.test", ("c1", answer))]
    # A wake names the key that noted itself asleep, a host of the domain or the domain.
    for asleep in ("www.shop.test", "shop.test"):
        wake = HostWake("c1", asleep)
        assert list(decode.process(wake.to_bytes())) == [("shop.test", ("c1", wake))]
    bare = HostWake("c1", "10.0.0.1:8080")  # an address is its own domain, without a port
    assert list(decode.process(bare.to_bytes())) == [("10.0.0.1", ("c1", bare))]
