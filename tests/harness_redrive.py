"""What the redrive tests share: a parser with a bug on some pages, and the checks that the pages
it dead-lettered were parsed again from their stored responses, without a new request."""

from __future__ import annotations

from collections import Counter

from pipeline.io.pages_table import query_pages


def assert_parsed_again_without_a_request(out: str, crawl_id: str, dead: set[str],
                                          requests_after, port: int) -> dict[str, str]:
    """The redriven pages' checks: one row per URL in the Parquet table, each letter's page
    parsed now (text stored, or the reason there is none), and none of them requested again
    (`requests_after`: the web's log after the redrive). Returns each URL's final state."""
    rows = query_pages(out, crawl_id, "SELECT url, state, reason, wet_file FROM pages")
    per_url = Counter(url for url, _, _, _ in rows)
    assert [url for url, n in per_url.items() if n > 1] == []
    final = {url: (state, reason, wet) for url, state, reason, wet in rows}
    for url in dead:
        state, reason, wet = final[url]
        assert state in ("fetched", "duplicate"), (url, state, reason)
        assert wet or reason in ("no main text found", "meta robots noindex: text not stored")
    again = {f"http://{r.host}:{port}{r.path}" for r in requests_after}
    assert dead.isdisjoint(again)
    return {url: state for url, (state, _, _) in final.items()}


def parser_failing_on_some_pages(real_parse, broken: set[str]):
    """parse_page with a bug: it fails on about a quarter of the .html pages (which ones
    depends on the run's string hashing), each added to `broken`."""
    def buggy_parse(url, body, content_type, **kwargs):
        if url.endswith(".html") and hash(url) % 4 == 0:
            broken.add(url)
            raise RuntimeError("parser bug: cannot handle this page")
        return real_parse(url, body, content_type, **kwargs)

    return buggy_parse
