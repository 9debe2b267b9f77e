"""Reading crawls through the control API, for the tests that drive a running server."""

from __future__ import annotations

import time

import httpx


class CrawlApi:
    """`client` is an httpx client with the token, set by the subclass."""

    client: httpx.Client

    def crawl(self, crawl_id: str) -> dict:
        answer = self.client.get(f"/crawls/{crawl_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def wait_for(self, crawl_id: str, done, what: str, timeout: float = 240.0) -> dict:
        """The crawl once `done(crawl)` holds; fails saying `what` did not happen in time."""
        deadline = time.monotonic() + timeout
        while not done(crawl := self.crawl(crawl_id)):
            assert time.monotonic() < deadline, f"{what} did not happen: {crawl}"
            time.sleep(0.25)  # polling the API for a condition; the deadline bounds it
        return crawl
