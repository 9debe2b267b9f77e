"""The control API over HTTP: a real uvicorn server on a free port, a real httpx client, the
shared Bigtable and Pub/Sub emulators behind it. Auth on every route, the JSON names of
docs/api.md, the status codes, crawl records with every counter, seeds on the fleet's frontier
and counted in the record, page lookups, and schemathesis over the served OpenAPI schema."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.records import FrontierBatch, PageRow, PageState
from pipeline.core.urls import host_key, normalize_url, url_hash
from pipeline.io.bigtable import COUNTERS, BigtableConfig, PageRowWriter, open_tables
from pipeline.io.segments import SegmentWriter
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.service.app import create_app
from pipeline.service.auth import TokenFileError, TokenSet, load_tokens
from pipeline.service.control import CrawlControl, PubSubFrontier
from pipeline.service.server import ApiServer
from pipeline.service.status import mount_status_page
from tests.conftest import fresh_name
from tests.harness_api import pull_frontier_batches

TOKEN = "t0ken-for-the-tests-" + uuid.uuid4().hex
OTHER_TOKEN = "second-token-of-the-tests-" + uuid.uuid4().hex
PROJECT = "api-test"
# The limits a crawl that sets none gets (`crawler serve`'s flags); its page budget is its own.
DEFAULTS = CrawlLimits(max_pages=1, min_delay=1.0, user_agent="testbot/1.0")


class Fleet:
    """The API as served, and what it writes to: tables, frontier topic, a subscription."""

    def __init__(self) -> None:
        config = BigtableConfig(PROJECT, fresh_name("i"), timeout_s=10)
        self.tables = open_tables(config, create=True)
        topic = ensure_topic(PROJECT, fresh_name("frontier"))
        self.subscription = ensure_subscription(PROJECT, topic, fresh_name("s"))
        self.frontier = PubSubFrontier(topic)
        self.control = CrawlControl(self.tables, self.frontier, DEFAULTS)
        self.app = create_app(self.control, TokenSet([TOKEN, OTHER_TOKEN]))
        self.out = tempfile.mkdtemp(prefix="api-out-")
        mount_status_page(self.app, out=self.out)
        self.server = ApiServer(self.app).start()
        self.client = httpx.Client(base_url=self.server.url,
                                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.frontier.close()
        self.tables.close()
        shutil.rmtree(self.out, ignore_errors=True)

    def frontier_batches(self, expected: int, timeout: float = 30.0) -> list[FrontierBatch]:
        """Pull until `expected` messages arrived (or the deadline passes)."""
        return pull_frontier_batches(self.subscription, expected, timeout)


@pytest.fixture(scope="module")
def fleet(emulators) -> Iterator[Fleet]:
    running = Fleet()
    try:
        yield running
    finally:
        running.close()


def _create(fleet: Fleet, **body) -> dict:
    body.setdefault("seeds", ["http://a.test/"])
    body.setdefault("max_pages", 10)
    answer = fleet.client.post("/crawls", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


# --- Auth ----------------------------------------------------------------------------------


def _every_route(fleet: Fleet, crawl_id: str) -> list[tuple[str, str]]:
    routes = []
    for path, methods in fleet.app.openapi()["paths"].items():
        for method in methods:
            routes.append((method.upper(), path.replace("{crawl_id}", crawl_id)))
    return routes


def test_every_route_but_healthz_answers_401_without_a_token_or_with_a_wrong_one(fleet):
    crawl_id = _create(fleet)["id"]
    routes = _every_route(fleet, crawl_id)
    assert {path for _, path in routes} >= {
        "/crawls", f"/crawls/{crawl_id}", f"/crawls/{crawl_id}/pause",
        f"/crawls/{crawl_id}/resume", f"/crawls/{crawl_id}/cancel", "/pages", "/healthz"}
    with httpx.Client(base_url=fleet.server.url) as anonymous:
        for method, path in routes:
            params = {"url": "http://a.test/"} if path == "/pages" else None
            body = {"seeds": ["http://a.test/"], "max_pages": 1} if method == "POST" else None
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                            {"Authorization": f"Basic {TOKEN}"},
                            {"Authorization": f"Bearer {TOKEN}x"}):
                answer = anonymous.request(method, path, params=params, json=body,
                                           headers=headers)
                if path == "/healthz":
                    assert answer.status_code == 200, (method, path)
                    continue
                assert answer.status_code == 401, (method, path, headers, answer.text)
                assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="crawler"')
                assert TOKEN not in answer.text
    # Nothing was done by the refused requests.
    assert fleet.client.get(f"/crawls/{crawl_id}").json()["state"] == "running"


def test_each_token_of_the_file_is_accepted(fleet):
    answer = fleet.client.get("/crawls", headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
    assert answer.status_code == 200


def test_tokens_never_reach_the_logs(fleet, caplog):
    caplog.set_level(logging.DEBUG)
    crawl_id = _create(fleet)["id"]
    fleet.client.post(f"/crawls/{crawl_id}/pause")
    fleet.client.get("/crawls", headers={"Authorization": "Bearer a-wrong-token-0123456789"})
    fleet.client.get("/pages", params={"url": "http://nowhere.test/"})
    text = "\n".join(record.getMessage() + repr(record.args) for record in caplog.records)
    assert "/pause" in text  # the access log was captured
    assert TOKEN not in text and "a-wrong-token-0123456789" not in text


def test_the_token_file_must_hold_a_usable_token(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.write_text("# no token yet\n\n")
    with pytest.raises(TokenFileError, match="holds no token"):
        load_tokens(empty)
    with pytest.raises(TokenFileError, match="cannot read"):
        load_tokens(tmp_path / "missing")
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(TokenFileError, match="shorter than") as refused:
        load_tokens(short)
    assert "abc" not in str(refused.value)
    good = tmp_path / "good"
    good.write_text(f"# operators\n{TOKEN}\n  {OTHER_TOKEN}  \n")
    tokens = load_tokens(good)
    assert len(tokens) == 2 and tokens.accepts(TOKEN) and tokens.accepts(OTHER_TOKEN)
    assert not tokens.accepts(TOKEN[:-1]) and not tokens.accepts("")
    assert TOKEN not in repr(vars(tokens))  # kept as digests only


def test_serve_refuses_to_start_without_tokens(tmp_path: Path, capsys):
    from pipeline.cli.main import main

    empty = tmp_path / "tokens"
    empty.write_text("\n")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "0", "--token-file", str(empty)])
    assert exited.value.code == 2
    assert "holds no token" in capsys.readouterr().err


# --- Crawls --------------------------------------------------------------------------------


def test_a_new_crawl_is_201_with_the_issue_s_names_and_its_seeds_on_the_frontier(fleet):
    crawl = _create(fleet, seeds=["HTTP://Seed.TEST/a?b=1&a=2#x", "http://seed.test/b"],
                    max_pages=40, max_pages_per_host=4, max_depth=2, min_delay=0.5,
                    max_duration_s=120, user_agent="mybot/2.0")
    assert {"id", "state", "reason", "seeds", "max_pages", "max_pages_per_host", "max_depth",
            "min_delay", "max_duration_s", "user_agent", "created_at", "started_at",
            "ended_at", "counters", "frontier", "hosts_active", "hosts_parked",
            "urls_on_parked_hosts", "pages_per_s", "scope", "include", "exclude",
            "sitemaps"} == set(crawl)
    assert crawl["state"] == "running" and crawl["ended_at"] is None
    # Seeds are normalised to the URL the crawler requests: the query keeps its own order.
    assert crawl["seeds"] == ["http://seed.test/a?b=1&a=2", "http://seed.test/b"]
    assert (crawl["max_pages"], crawl["max_pages_per_host"], crawl["max_depth"],
            crawl["min_delay"], crawl["max_duration_s"], crawl["user_agent"]) == (
        40, 4, 2, 0.5, 120.0, "mybot/2.0")
    # Every counter of the record, none counted yet when it was created.
    assert crawl["counters"] == dict.fromkeys(COUNTERS, 0) and crawl["frontier"] == 0
    batches = [b for b in fleet.frontier_batches(expected=1) if b.crawl_id == crawl["id"]]
    assert [(b.kind, b.depth, b.urls) for b in batches] == [
        ("seeds", 0, ("http://seed.test/a?b=1&a=2", "http://seed.test/b"))]
    # The seeds are the crawl's first frontier message, in its balance: its watch waits for
    # them to be read before it can call the crawl drained.
    again = fleet.client.get(f"/crawls/{crawl['id']}").json()
    assert again["pages_per_s"] in (None, 0.0)  # nothing fetched: no rate yet, or none
    assert again == {**crawl, "counters": {**crawl["counters"], "batches_published": 1},
                     "pages_per_s": again["pages_per_s"]}


def test_limits_left_out_get_the_fleet_defaults(fleet):
    crawl = _create(fleet)
    assert (crawl["min_delay"], crawl["user_agent"]) == (DEFAULTS.min_delay, DEFAULTS.user_agent)
    assert (crawl["max_pages_per_host"], crawl["max_depth"], crawl["max_duration_s"]) == (
        None, None, None)
    fleet.frontier_batches(expected=1)


def test_a_crawl_s_scope_is_kept_with_it_and_left_out_is_every_url(fleet):
    crawl = _create(fleet, scope="same-domain", include=["/docs/", "/blog/"],
                    exclude=[r"\.pdf$"])
    assert (crawl["scope"], crawl["include"], crawl["exclude"]) == (
        "same-domain", ["/docs/", "/blog/"], [r"\.pdf$"])
    assert fleet.client.get(f"/crawls/{crawl['id']}").json()["include"] == ["/docs/", "/blog/"]
    plain = _create(fleet)  # this fleet's defaults set no scope: every URL is in it
    assert (plain["scope"], plain["include"], plain["exclude"]) == (None, None, None)
    fleet.frontier_batches(expected=2)


def test_a_crawl_that_reads_sitemaps_keeps_it_in_its_record_and_left_out_is_off(fleet):
    crawl = _create(fleet, sitemaps=True)
    assert crawl["sitemaps"] is True
    assert fleet.client.get(f"/crawls/{crawl['id']}").json()["sitemaps"] is True
    plain = _create(fleet)  # this fleet's defaults set none: off, as CrawlLimits reads it
    assert plain["sitemaps"] is None
    answer = fleet.client.post("/crawls", json={"seeds": ["http://ok.test/"], "max_pages": 5,
                                                "sitemaps": "sometimes"})
    assert answer.status_code == 422 and "sitemaps" in answer.text
    fleet.frontier_batches(expected=2)


@pytest.mark.parametrize("field, value, words", [
    ("scope", "same-site", "'same-site' is not one of all, same-host, same-domain"),
    ("include", ["/docs/", "(unclosed"], "not a regular expression"),
    ("exclude", ["[a-"], "not a regular expression"),
    ("exclude", ["(?<=/)private"], "without backreferences or lookaround"),
    ("include", "/docs/", "list"),
])
def test_a_bad_scope_or_regex_is_422_saying_what_is_wrong(fleet, field, value, words):
    answer = fleet.client.post("/crawls", json={"seeds": ["http://ok.test/"], "max_pages": 5,
                                                field: value})
    assert answer.status_code == 422, answer.text
    assert words in answer.text


@pytest.mark.parametrize("seed, reason", [
    ("ftp://files.test/x", "scheme 'ftp'"),
    ("/relative/path", "relative URL"),
    ("http://", "no host"),
])
def test_a_bad_seed_is_422_naming_the_seed_and_the_reason(fleet, seed, reason):
    answer = fleet.client.post("/crawls", json={"seeds": ["http://ok.test/", seed],
                                                "max_pages": 5})
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body", "seeds", 1]
    assert repr(seed) in error["msg"] and reason in error["msg"]


@pytest.mark.parametrize("body", [
    {"seeds": [], "max_pages": 5},
    {"seeds": ["http://a.test/"]},
    {"seeds": ["http://a.test/"], "max_pages": 0},
    {"seeds": ["http://a.test/"], "max_pages": 5, "min_delay": 0},
    {"seeds": ["http://a.test/"], "max_pages": 5, "user_agent": "bad\nagent"},
    {"seeds": ["http://a.test/"], "max_pages": 5, "surprise": 1},
])
def test_a_request_breaking_the_schema_is_422(fleet, body):
    assert fleet.client.post("/crawls", json=body).status_code == 422


def test_a_priority_function_is_the_operators_and_a_request_naming_one_is_422(fleet):
    """--priority names code the crawler imports: a caller may not choose it. The 422 says
    why, rather than the "extra field" a misspelt name gets, and no crawl starts."""
    def newest() -> list[str]:
        return [c["id"] for c in fleet.client.get("/crawls", params={"limit": 5}).json()["crawls"]]

    before = newest()
    answer = fleet.client.post("/crawls", json={
        "seeds": ["http://a.test/"], "max_pages": 5,
        "priority": "examples.priority_hooks:shortest_path_first"})
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert "operator's option --priority" in error["msg"] and "names code" in error["msg"]
    assert newest() == before


@pytest.mark.parametrize("body", [
    b'{"seeds": ["http://a.test/"], "max_pages": NaN}',
    b'{"seeds": ["http://a.test/"], "max_pages": 5, "min_delay": Infinity}',
    b'{"seeds": ["http://a.test/"], "max_pages": 5, "max_duration_s": -Infinity}',
    b'{"seeds": [NaN], "max_pages": 5}',
    b'[NaN]',
])
def test_nan_and_infinity_are_422_with_a_json_body_naming_them(fleet, body):
    answer = fleet.client.post("/crawls", content=body,
                               headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    errors = answer.json()["detail"]
    assert errors and all("loc" in error and "msg" in error for error in errors)
    assert any(error.get("input") in ("NaN", "Infinity", "-Infinity", ["NaN"])
               for error in errors), errors


@pytest.mark.parametrize("body", [
    b'{"seeds": ["http://a.test/"], "max_pages": NaN}', b"{not json", b"\xff\xfe\x00garbage",
    b'{"seeds": ["http://a.test/\xff"], "max_pages": 5}', b"", b'{"seeds": [], "max_pages": 0}',
])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-0123456789"},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_without_a_valid_token_the_body_is_never_read_401_whatever_it_is(fleet, body, headers):
    with httpx.Client(base_url=fleet.server.url) as anonymous:
        answer = anonymous.post("/crawls", content=body,
                                headers=headers | {"Content-Type": "application/json"})
    assert answer.status_code == 401, answer.text
    assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="crawler"')
    assert isinstance(answer.json()["detail"], str)


def test_a_body_that_is_not_utf8_is_422_not_400(fleet):
    answer = fleet.client.post("/crawls", content=b'{"seeds": ["http://a.test/\xff"]}',
                               headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"][0] == "body"


def test_docs_and_redoc_load_only_assets_the_server_serves(fleet):
    import re

    with httpx.Client(base_url=fleet.server.url) as anonymous:
        for page in ("/docs", "/redoc"):
            html = anonymous.get(page)
            assert html.status_code == 200
            urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
            urls += re.findall(r"""url: ?['"]([^'"]+)['"]""", html.text)
            assert urls, html.text
            assert not [u for u in urls if "//" in u], (page, urls)  # nothing from elsewhere
            for url in urls:
                asset = anonymous.get(url)
                assert asset.status_code == 200, (page, url)
                if url.endswith(".js"):
                    assert len(asset.content) > 100_000, url  # the library itself, not a stub
    vendor = Path(__file__).resolve().parents[1] / "pipeline/service/static/vendor"
    for library in ("swagger-ui", "redoc", "uplot"):
        assert (vendor / library / "LICENSE").is_file(), library


def test_pause_resume_cancel_give_the_new_state_and_409_when_they_do_not_apply(fleet):
    crawl_id = _create(fleet)["id"]
    steps = [("pause", 200, "paused"), ("pause", 409, "paused"), ("resume", 200, "running"),
             ("resume", 409, "running"), ("cancel", 200, "cancelling"),
             ("resume", 409, "cancelling"), ("cancel", 409, "cancelling"),
             ("pause", 409, "cancelling")]
    for action, status, state in steps:
        answer = fleet.client.post(f"/crawls/{crawl_id}/{action}")
        assert answer.status_code == status, (action, answer.text)
        if status == 200:
            assert answer.json()["state"] == state and answer.json()["id"] == crawl_id
        else:
            assert f"cannot {action} a crawl that is {state}" in answer.json()["detail"]
        assert fleet.client.get(f"/crawls/{crawl_id}").json()["state"] == state


@pytest.mark.parametrize("crawl_id", ["c-missing", "no such id!", "x" * 300])
def test_an_unknown_crawl_is_404_on_every_crawl_route(fleet, crawl_id):
    for method, suffix in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"),
                           ("POST", "/cancel")):
        answer = fleet.client.request(method, f"/crawls/{crawl_id}{suffix}")
        assert answer.status_code == 404, (method, suffix)
        assert "no crawl" in answer.json()["detail"]


def test_crawls_are_listed_newest_first_in_pages(fleet):
    mine = [_create(fleet)["id"] for _ in range(5)]
    listed: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        answer = fleet.client.get("/crawls", params=params)
        assert answer.status_code == 200
        page = answer.json()
        assert len(page["crawls"]) <= 2
        listed.extend(crawl["id"] for crawl in page["crawls"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert listed[:5] == list(reversed(mine))
    assert len(listed) == len(set(listed))
    created = [fleet.client.get(f"/crawls/{i}").json()["created_at"] for i in listed]
    assert created == sorted(created, reverse=True)
    bad = fleet.client.get("/crawls", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 422 and "cursor" in json.dumps(bad.json())
    assert fleet.client.get("/crawls", params={"limit": 0}).status_code == 422


def test_a_crawl_whose_seeds_cannot_be_published_is_503_and_ends_cancelled(fleet):
    def refusing(batches):
        raise RuntimeError("frontier topic unreachable")

    control = CrawlControl(fleet.tables, refusing, DEFAULTS)
    with ApiServer(create_app(control, TokenSet([TOKEN]))) as server, httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
    ) as client:
        answer = client.post("/crawls", json={"seeds": ["http://a.test/"], "max_pages": 3})
        assert answer.status_code == 503
        assert "frontier topic unreachable" in answer.json()["detail"]
        newest = client.get("/crawls", params={"limit": 1}).json()["crawls"][0]
    assert newest["state"] == "cancelled" and newest["ended_at"] is not None
    assert "seeds could not be published" in newest["reason"]


# --- Pages ---------------------------------------------------------------------------------


def test_a_page_is_found_by_any_spelling_with_its_text_on_request(fleet, tmp_path: Path):
    url = normalize_url("http://pages.test/article?b=2&a=1")
    wet = SegmentWriter(str(tmp_path), "pagecrawl", "wet", "w1")
    pointer = wet.write_text(url, 1_700_000_000.0, "The article's text.")
    wet.flush()
    writer = PageRowWriter(fleet.tables)
    writer.add(PageRow(crawl_id="pagecrawl", url=url, url_hash=url_hash(url),
                       host=host_key(url), depth=1, state=PageState.FETCHED, http_status=200,
                       fetched_at=1_700_000_000.0, attempts=1, wet=pointer))
    writer.flush()
    wet.close()

    spelling = "HTTP://Pages.TEST:80/article?a=1&b=2&utm_source=x#top"
    answer = fleet.client.get("/pages", params={"url": spelling})
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert (page["url"], page["crawl_id"], page["state"], page["http_status"]) == (
        url, "pagecrawl", "fetched", 200)
    assert page["fetched_at"].startswith("2023-11-14T22:13:20")
    assert "text" not in page
    with_text = fleet.client.get("/pages", params={"url": spelling, "text": "true",
                                                   "crawl_id": "pagecrawl"}).json()
    assert with_text["text"] == "The article's text."
    missing = fleet.client.get("/pages", params={"url": url, "crawl_id": "other"})
    assert missing.status_code == 404 and "crawl other" in missing.json()["detail"]
    assert fleet.client.get("/pages", params={"url": "http://pages.test/none"}).status_code == 404
    invalid = fleet.client.get("/pages", params={"url": "mailto:x@pages.test"})
    assert invalid.status_code == 422 and "mailto" in invalid.json()["detail"][0]["msg"]


# --- The status page's report --------------------------------------------------------------


def test_the_report_counts_hosts_reasons_and_pages_per_second_from_the_pages_table(fleet):
    from pipeline.io.pages_table import PagesTableWriter

    crawl = _create(fleet)
    started = datetime.fromisoformat(crawl["started_at"]).timestamp()
    empty = fleet.client.get(f"/crawls/{crawl['id']}/report")
    assert empty.status_code == 200, empty.text
    assert empty.json()["rows"] == 0 and empty.json()["top_hosts"] == []

    writer = PagesTableWriter(fleet.out, crawl["id"], "w1")
    plan = [("big.test", PageState.FETCHED, "", 12), ("big.test", PageState.FAILED,
                                                        "HTTP 503", 3),
            ("small.test", PageState.FETCHED, "", 2), ("small.test", PageState.DISALLOWED,
                                                        "robots.txt", 4)]
    n = 0
    for host, state, reason, count in plan:
        for _ in range(count):
            url = f"http://{host}/{n}"
            writer.add(PageRow(crawl_id=crawl["id"], url=url, url_hash=url_hash(url),
                               host=host, depth=1, state=state, reason=reason,
                               fetched_at=started + n * 0.5 if state != "disallowed" else None,
                               attempts=1))
            n += 1
    writer.flush()
    report = fleet.client.get(f"/crawls/{crawl['id']}/report").json()
    assert report["rows"] == 21
    assert [(h["host"], h["pages"], h["fetched"], h["failed"]) for h in report["top_hosts"]] == [
        ("big.test", 15, 12, 3), ("small.test", 6, 2, 0)]
    assert [(r["state"], r["reason"], r["pages"]) for r in report["top_reasons"]] == [
        ("disallowed", "robots.txt", 4), ("failed", "HTTP 503", 3)]
    # 14 fetched pages over the intervals, none lost, the first interval holding the start.
    assert sum(p["pages_per_s"] for p in report["rate"]) * report["bucket_s"] == (
        pytest.approx(14))
    assert report["rate"][0]["t"] <= started < report["rate"][0]["t"] + report["bucket_s"]
    assert fleet.client.get("/crawls/c-missing/report").status_code == 404
    with httpx.Client(base_url=fleet.server.url) as anonymous:
        assert anonymous.get(f"/crawls/{crawl['id']}/report").status_code == 401


def test_rate_intervals_stay_few_and_count_every_page():
    from hypothesis import given
    from hypothesis import strategies as st

    from pipeline.service.status import MAX_BUCKETS, rate_series

    @given(st.floats(0, 10**6), st.lists(st.floats(0, 1), max_size=50))
    def check(span, fractions):
        start = 1_700_000_000.0
        times = [start + f * span for f in fractions]
        width, points = rate_series(times, start, start + span)
        assert len(points) <= MAX_BUCKETS + 2  # the first interval starts before `start`
        assert round(sum(p.pages_per_s for p in points) * width) == len(times)

    check()


# --- The schema ----------------------------------------------------------------------------


def test_the_schema_documents_every_error_response(fleet):
    schema = fleet.client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    expected = {
        ("post", "/crawls"): {"201", "401", "422", "503"},
        ("get", "/crawls"): {"200", "401", "422", "503"},
        ("get", "/crawls/{crawl_id}"): {"200", "401", "404", "422", "503"},
        ("post", "/crawls/{crawl_id}/pause"): {"200", "401", "404", "409", "422", "503"},
        ("post", "/crawls/{crawl_id}/resume"): {"200", "401", "404", "409", "422", "503"},
        ("post", "/crawls/{crawl_id}/cancel"): {"200", "401", "404", "409", "422", "503"},
        ("get", "/pages"): {"200", "401", "404", "422", "503"},
        ("get", "/crawls/{crawl_id}/report"): {"200", "401", "404", "422", "503"},
        ("get", "/healthz"): {"200"},
    }
    for (method, path), codes in expected.items():
        operation = schema["paths"][path][method]
        assert set(operation["responses"]) == codes, (method, path)
        assert ("security" in operation) == (path != "/healthz"), (method, path)


def _schemathesis_run(url: str, headers: dict[str, str], examples: int,
                      expect_401: bool) -> tuple[int, list[str]]:
    """Requests generated from the served schema, valid and invalid (negative mode too), for
    every operation; every built-in check but one. Returns (requests sent, failures)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.specs.openapi.checks import (
        negative_data_rejection,
        positive_data_acceptance,
    )

    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    excluded = [positive_data_acceptance] + ([] if expect_401 else [negative_data_rejection])
    failures: list[str] = []
    sent = [0]
    for operation in schema.get_all_operations():
        api_operation = operation.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(max_examples=examples, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=api_operation.as_strategy(generation_mode=mode))
            def check(case):
                sent[0] += 1
                try:
                    # Whether a seed can be crawled (IDNA, ports, hosts) is more than JSON
                    # Schema can say, so a schema-valid seed may rightly be a 422. With a
                    # token, "invalid request rejected" is left out too: the token is added
                    # to every request (so a case "without Authorization" still has it; the
                    # runs without a token cover that), and unknown query parameters are
                    # ignored, as HTTP APIs do. A 5xx or a response outside the schema
                    # still fails.
                    response = case.call_and_validate(headers=headers,
                                                      excluded_checks=excluded)
                    if expect_401 and case.path != "/healthz":
                        assert response.status_code == 401, (
                            f"{response.status_code} without a valid token")
                except AssertionError as exc:
                    failures.append(f"{case.method} {case.path}: {exc}")
                    raise

            try:
                check()
            except AssertionError:  # recorded in failures; the other operations still run
                pass
            except Unsatisfiable:
                # /healthz takes no input at all, so no request to it can break the schema.
                if api_operation.path != "/healthz" or mode is not mode.NEGATIVE:
                    failures.append(f"{api_operation.method} {api_operation.path}: "
                                    "no request could be generated")
            except Exception as exc:  # noqa: BLE001 - any other error is a failure too
                failures.append(f"{api_operation.method} {api_operation.path}: {exc!r}")
    return sent[0], failures


def test_schemathesis_finds_no_server_error_and_no_schema_violation(fleet):
    sent, failures = _schemathesis_run(fleet.server.url, {"Authorization": f"Bearer {TOKEN}"},
                                       examples=30, expect_401=False)
    assert failures == []
    assert sent >= 8 * 2 * 10  # every operation, both modes, really exercised


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-token-0123456789"}])
def test_schemathesis_without_a_valid_token_gets_401_everywhere_and_no_server_error(
        fleet, headers):
    sent, failures = _schemathesis_run(fleet.server.url, headers, examples=10,
                                       expect_401=True)
    assert failures == []
    assert sent >= 8 * 2 * 3

