"""Sitemap reading: turn a fetched sitemap body into the page URLs or child sitemaps it lists.

This module owns what a sitemap may cost and when one is refused. It does not fetch, resolve
robots.txt, check scope or normalise URLs: with `--sitemaps` a sitemap is a URL of its host
marked as a sitemap document, fetched like any page by the host's scheduler, and the store
reads its body here (pipeline.core.pages.judge_sitemap); the URLs it lists go to the frontier
as links do (docs/design.md, "Sitemaps").

Why these limits: the sitemaps protocol (sitemaps.org) caps a file at 50,000 URLs and 50 MB
uncompressed, so more than that is not a sitemap we owe anything to. Both caps cut, count and
carry on: a gzip bomb inflates no further than MAX_SITEMAP_BYTES (inflated a piece at a time),
and the URLs past MAX_SITEMAP_URLS are counted, not kept. XML is read by lxml with entities
left unresolved, no network and no DTD loading, and a document that declares any entity is
refused, so neither an entity bomb (billion laughs) nor an external entity (a local file or a
URL) is ever expanded or read.
"""

from __future__ import annotations

import io
import re
import zlib
from dataclasses import dataclass
from enum import StrEnum

from lxml import etree

MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # the protocol's cap on an uncompressed sitemap
MAX_SITEMAP_URLS = 50_000  # the protocol's cap on entries per sitemap

# Sitemap documents and the pages they list are one hop from the seeds, as a seed's links are:
# --max-depth counts them so.
SITEMAP_DEPTH = 1

_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1024 * 1024  # inflated per step, so memory never holds more than the cap
_XML_TYPES = frozenset({"application/xml", "text/xml", "application/rss+xml"})
_GZIP_TYPES = frozenset({"application/gzip", "application/x-gzip"})
# Servers label gzip files and plain files loosely; the bytes decide for these.
_LOOSE_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_TEXT_TYPES = frozenset({"text/plain"})
_URL_PREFIXES = ("http://", "https://")
# A DOCTYPE with an internal subset, where entities are declared; and the root's start tag,
# which ends the prolog it may sit in.
_DTD_SUBSET = re.compile(rb"<!DOCTYPE[^>\[]*\[", re.IGNORECASE)
_ROOT_START = re.compile(rb"<[A-Za-z_]")


class SitemapKind(StrEnum):
    """What a sitemap turned out to be."""

    URLSET = "urlset"  # lists pages
    INDEX = "index"  # lists more sitemaps
    REFUSED = "refused"  # not a sitemap we read: wrong type, invalid XML, entities, bad gzip


@dataclass(frozen=True, slots=True)
class SitemapContents:
    """The URLs one sitemap lists and what was cut from it.

    urls: absolute http(s) URLs in document order, at most MAX_SITEMAP_URLS: pages for a
        URLSET, sitemaps for an INDEX; for REFUSED, the entries read before the fault.
    urls_cut: entries past MAX_SITEMAP_URLS, counted and dropped.
    bytes_cut: the inflated body reached MAX_SITEMAP_BYTES and the rest was not read.
    problem: why the sitemap was refused, or None.
    """

    kind: SitemapKind
    urls: tuple[str, ...]
    urls_cut: int = 0
    bytes_cut: bool = False
    problem: str | None = None

    @property
    def reason(self) -> str:
        """One line for the sitemap's row: what it listed, or why it was refused."""
        noun = "sitemaps" if self.kind is SitemapKind.INDEX else "URLs"
        parts = [f"sitemap: {len(self.urls)} {noun}"]
        if self.urls_cut:
            parts.append(f"{self.urls_cut} cut past {MAX_SITEMAP_URLS}")
        if self.bytes_cut:
            parts.append(f"cut at {MAX_SITEMAP_BYTES // (1024 * 1024)} MB")
        if self.problem:
            parts.append(f"refused: {self.problem}")
        return "; ".join(parts)


def _mime_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def inflate_gzip(body: bytes, limit: int = MAX_SITEMAP_BYTES) -> tuple[bytes, bool]:
    """The gzip body inflated to at most `limit` bytes, and whether more was left.

    Inflates a step at a time so a bomb costs `limit` bytes of memory, never its full size.
    Raises zlib.error on a body that is not gzip. A truncated body gives what it holds.
    """
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    pending = body
    while pending and len(out) <= limit:
        step = inflater.decompress(pending, min(_INFLATE_STEP, limit + 1 - len(out)))
        out += step
        pending = inflater.unconsumed_tail
        if not step and not pending:
            break
        if inflater.eof:
            break
    if len(out) > limit:
        return bytes(out[:limit]), True
    return bytes(out), False


def read_sitemap(body: bytes, content_type: str | None,
                 max_urls: int = MAX_SITEMAP_URLS,
                 max_bytes: int = MAX_SITEMAP_BYTES,
                 truncated: bool = False) -> SitemapContents:
    """Read one fetched sitemap (XML, gzip-compressed XML, or plain text with one URL a line).

    Never raises on bad input: a body that is not a sitemap comes back REFUSED with why.
    `truncated`: the fetch already cut the body (--max-body-bytes); the entries before the
    cut stand, as they do past max_bytes.
    """
    mime = _mime_type(content_type)
    gzipped = body.startswith(_GZIP_MAGIC)
    if mime not in _XML_TYPES | _GZIP_TYPES | _LOOSE_TYPES | _TEXT_TYPES and not gzipped:
        return SitemapContents(SitemapKind.REFUSED, (),
                               problem=f"content type {mime!r} is not a sitemap's")
    bytes_cut = False
    if gzipped:
        try:
            body, bytes_cut = inflate_gzip(body, max_bytes)
        except zlib.error as error:
            return SitemapContents(SitemapKind.REFUSED, (), problem=f"bad gzip: {error}")
    elif len(body) > max_bytes:
        body, bytes_cut = body[:max_bytes], True
    if mime in _TEXT_TYPES and not body.lstrip().startswith(b"<"):
        return _read_text(body, max_urls, bytes_cut)
    return _read_xml(body, max_urls, bytes_cut, truncated)


def _read_text(body: bytes, max_urls: int, bytes_cut: bool) -> SitemapContents:
    urls: list[str] = []
    cut = 0
    for line in body.decode("utf-8", "replace").splitlines():
        url = line.strip()
        if not url.startswith(_URL_PREFIXES):
            continue
        if len(urls) < max_urls:
            urls.append(url)
        else:
            cut += 1
    return SitemapContents(SitemapKind.URLSET, tuple(urls), cut, bytes_cut)


def _local_name(tag: object) -> str:
    return etree.QName(tag).localname if isinstance(tag, str) else ""


def _read_xml(body: bytes, max_urls: int, bytes_cut: bool,
              truncated: bool = False) -> SitemapContents:
    root = _ROOT_START.search(body)
    if _DTD_SUBSET.search(body, 0, root.start() if root else len(body)):
        # Refused before lxml sees it: no entity of it is ever parsed, let alone expanded.
        return SitemapContents(SitemapKind.REFUSED, (), problem="declares XML entities")
    kind: SitemapKind | None = None
    urls: list[str] = []
    cut = 0
    entry = ""  # "url" or "sitemap": the entry whose <loc> counts
    events = etree.iterparse(
        io.BytesIO(body), events=("start", "end"), resolve_entities=False, no_network=True,
        load_dtd=False, huge_tree=False, remove_comments=True, remove_pis=True)
    try:
        for event, element in events:
            name = _local_name(element.tag)
            if kind is None:
                problem = _declared_entities(element)
                if problem:
                    return SitemapContents(SitemapKind.REFUSED, (), problem=problem)
                if name == "urlset":
                    kind, entry = SitemapKind.URLSET, "url"
                elif name == "sitemapindex":
                    kind, entry = SitemapKind.INDEX, "sitemap"
                else:
                    return SitemapContents(SitemapKind.REFUSED, (),
                                           problem=f"root element <{name}> is not a sitemap's")
                continue
            if event != "end":
                continue
            if name == "loc" and _local_name(element.getparent().tag) == entry:
                url = (element.text or "").strip()
                if url.startswith(_URL_PREFIXES):
                    if len(urls) < max_urls:
                        urls.append(url)
                    else:
                        cut += 1
            if name == entry:
                # Keep memory flat: a read entry is not needed again.
                element.clear()
                parent = element.getparent()
                while parent is not None and element.getprevious() is not None:
                    del parent[0]
    except etree.XMLSyntaxError as error:
        if (bytes_cut or truncated) and kind is not None:
            # The cut ended the document mid-element; the entries before it stand.
            return SitemapContents(kind, tuple(urls), cut, bytes_cut)
        return SitemapContents(SitemapKind.REFUSED, tuple(urls), cut, bytes_cut,
                               problem=f"invalid XML: {error}")
    if kind is None:
        return SitemapContents(SitemapKind.REFUSED, (), problem="empty document")
    return SitemapContents(kind, tuple(urls), cut, bytes_cut)


def _declared_entities(root: etree._Element) -> str | None:
    """Why a document's DTD is refused (it declares entities), or None."""
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        return "declares XML entities"
    return None
