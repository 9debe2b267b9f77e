"""The Scrapy side of the worker-cost benchmark: fetch a fixed list of pages, extract each one's
text with the crawler's extractor settings and its links, follow nothing.

This module owns only the spider; bench.worker_cost serves the recorded pages from another
process, runs

    python -m scrapy runspider bench/scrapy_pages.py -a urls_file=F -a extractor=trafilatura \
        -O OUT/items.jsonl -s TWISTED_DNS_RESOLVER=bench.scrapy_crawl.LoopbackResolver ...

and takes the CPU of that process alone. The per-page work mirrors the crawler's store stage:
the same extractor call with the same settings (trafilatura on the page's text, or the
crawler's resiliparse settings), every a/area/canonical link except nofollow ones (Scrapy's
own link extractor, on its own lxml parse), normalised with the crawler's normaliser and
deduplicated within the page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import scrapy
import trafilatura
from scrapy.http import HtmlResponse, Request, Response
from scrapy.linkextractors import LinkExtractor

from pipeline.core.extractors import EXTRACTORS
from pipeline.core.parse import resiliparse_text, trafilatura_settings
from pipeline.core.urls import InvalidURL, normalize_url


class PagesSpider(scrapy.Spider):
    """One request per listed URL; one item (url, text, link count) per HTML page."""

    name = "worker-cost-pages"

    def __init__(self, urls_file: str = "", extractor: str = "trafilatura",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not urls_file:
            raise ValueError("pass the pages with -a urls_file=FILE (one URL per line)")
        if extractor not in EXTRACTORS:
            raise ValueError(f"extractor {extractor!r}: pick one of {', '.join(EXTRACTORS)}")
        self.resiliparse = extractor == "resiliparse"
        self.urls = [line.strip() for line in Path(urls_file).read_text().splitlines()
                     if line.strip()]
        self.settings_for_extract = dict(trafilatura_settings(extractor == "trafilatura-fast"))
        self.link_extractor = LinkExtractor(deny_extensions=[])

    async def start(self) -> AsyncIterator[Request]:
        for url in self.urls:
            yield Request(url, callback=self.parse, dont_filter=True)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        text = (resiliparse_text(response.text) if self.resiliparse
                else trafilatura.extract(response.text, url=response.url,
                                         **self.settings_for_extract))
        hrefs = [link.url for link in self.link_extractor.extract_links(response)
                 if not link.nofollow]
        hrefs += [response.urljoin(href) for href in
                  response.xpath("//link[@rel='canonical']/@href").getall()]
        links: dict[str, None] = {}
        for href in hrefs:
            try:
                links.setdefault(normalize_url(href), None)
            except InvalidURL:
                continue
        yield {"url": response.url, "status": response.status, "text": text,
               "links": len(links)}
