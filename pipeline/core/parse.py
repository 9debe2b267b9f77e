"""Page parsing: turn a fetched HTML body into text, title, links and robots directives.

This module owns decoding (charset), parsing a page once for its links and meta, and the
main-text extractors a crawl can choose (`--extractor`, catalogued with their figures in
extractors.py): trafilatura, in full or fast mode, reads the same lxml tree the links come
from; resiliparse reads the page with its own lexbor parser, and the links then come from
selectolax's lexbor tree instead of lxml's, which costs less. It does not normalise, filter
or deduplicate URLs (the frontier does), and it does not fingerprint text (see
fingerprints.py).

Why one parse with trafilatura: extraction, not fetching, bounds a crawl's CPU; parsing the
page twice (once for links, once inside trafilatura) would add a full lxml parse per page.
trafilatura.extract() accepts an lxml tree and works on its own copy, so the tree is not
mutated. Comments under an article are not the page's text for downstream users either, so
every extractor leaves them out. Both link walks find the same links, titles and directives
(a test compares them page by page on real and synthetic pages); the measurements behind these
choices are in docs/extraction.md.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import charset_normalizer
import trafilatura
from lxml import etree
from lxml.html import HtmlElement, HTMLParser, document_fromstring, tostring
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from pipeline.core.urls import InvalidURL, resolve_url


class PageParseError(ValueError):
    """The body could not be parsed as an HTML page; str(error) says why."""


@dataclass(frozen=True)
class ParsedPage:
    """What the crawler keeps from one HTML page.

    text: main text (trafilatura), or None when the page says noindex, extraction was not
        asked for, or nothing was found.
    links: absolute http(s) URLs in document order, exact repeats dropped, resolved as the
        URL Standard says (pipeline.core.urls.resolve_url) but not normalised;
        `<link rel=canonical>` is one of them; rel=nofollow links are left out, and the tuple
        is empty when the page's meta robots says nofollow.
    rejected_links: (reason, count) of the hrefs that are not http(s) URLs (mailto:,
        javascript:, invalid hosts, ...), sorted by reason; empty hrefs (the page itself) and
        nofollow links are not counted.
    charset: the Python codec the body was decoded with (e.g. "utf-8", "cp1252", "cp932").
    """

    text: str | None
    title: str | None
    links: tuple[str, ...]
    canonical: str | None
    noindex: bool
    nofollow: bool
    charset: str
    rejected_links: tuple[tuple[str, int], ...] = ()


# --- Content type ---------------------------------------------------------------------------

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Types that say "I don't know": WHATWG MIME sniffing looks at the bytes for these.
_UNKNOWN_TYPES = frozenset({"", "unknown/unknown", "application/unknown", "*/*"})
# WHATWG MIME sniffing: an HTML document starts (after whitespace) with one of these tags,
# followed by a space or ">".
_HTML_SNIFF_TAGS = (
    b"<!doctype html",
    b"<html",
    b"<head",
    b"<script",
    b"<iframe",
    b"<h1",
    b"<div",
    b"<font",
    b"<table",
    b"<a",
    b"<style",
    b"<title",
    b"<b",
    b"<body",
    b"<br",
    b"<p",
)
_SNIFF_BYTES = 1024


def _mime_type(content_type: str | None) -> str:
    if content_type is None:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def is_html(content_type: str | None, body: bytes) -> bool:
    """Whether a response is an HTML page: by its Content-Type, or by its first bytes when the
    type is missing or unknown."""
    mime = _mime_type(content_type)
    if mime in _HTML_TYPES:
        return True
    if mime not in _UNKNOWN_TYPES:
        return False
    head = body[:_SNIFF_BYTES]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        head = head.decode("utf-16", errors="replace").encode("utf-8")
    head = head.removeprefix(codecs.BOM_UTF8).lstrip(b" \t\n\r\x0c").lower()
    if head.startswith(b"<!--"):
        return True
    for tag in _HTML_SNIFF_TAGS:
        if head.startswith(tag) and head[len(tag) : len(tag) + 1] in (b" ", b">"):
            return True
    # An XML declaration or a long comment may come first in real XHTML/HTML pages.
    return b"<html" in head


# --- Charset --------------------------------------------------------------------------------

# Labels browsers know and Python does not (WHATWG Encoding standard), as Python codecs.
_LABEL_ALIASES = {
    "x-sjis": "cp932",
    "windows-31j": "cp932",
    "x-gbk": "gb18030",
    "windows-874": "cp874",
    "x-mac-roman": "mac-roman",
    "x-user-defined": "cp1252",
}
# Where browsers decode a label as a superset of the codec Python would pick, decode as
# browsers do: pages are written for browsers (ISO-8859-1 pages use windows-1252 quotes,
# Shift_JIS pages use Microsoft's extensions, ...). Keys are Python's canonical codec names.
_BROWSER_CODECS = {
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "tis-620": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "big5": "big5hkscs",
}
# A <meta> can only be read if the bytes are ASCII-compatible, so a meta naming UTF-16 is wrong
# (WHATWG: treat it as UTF-8). UTF-7 is refused outright (script injection through +ADw-).
_UTF16_CODECS = frozenset({"utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"})
_REFUSED_CODECS = frozenset({"utf-7"})
# ISO-8859-1 (decoded as cp1252) is what many servers declare when nobody configured a charset.
_SINGLE_BYTE_DEFAULTS = frozenset({"cp1252"})

_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(
    rb"""<meta\s[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.IGNORECASE
)
_HTML_COMMENT = re.compile(rb"<!--.*?-->", re.DOTALL)
_META_PRESCAN_BYTES = 4096
_DETECTOR_SAMPLE_BYTES = 64 * 1024


def _codec(label: str | None) -> str | None:
    """Python codec name for a charset label, or None if unknown or not a text encoding."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = _LABEL_ALIASES.get(label, label)
    try:
        b"x".decode(label, "ignore")  # rejects bytes-to-bytes codecs such as "base64"
        name = codecs.lookup(label).name
    except (LookupError, ValueError):
        return None
    if name in _REFUSED_CODECS:
        return None
    return _BROWSER_CODECS.get(name, name)


def _strict(body: bytes, codec: str) -> str | None:
    try:
        return body.decode(codec)
    except UnicodeDecodeError:
        return None


def _bom(body: bytes) -> tuple[str, int] | None:
    if body.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if body.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", 2
    if body.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", 2
    return None


def _meta_charset(body: bytes) -> str | None:
    head = _HTML_COMMENT.sub(b"", body[:_META_PRESCAN_BYTES])
    match = _META_CHARSET.search(head)
    if match is None:
        return None
    codec = _codec(match.group(1).decode("ascii", errors="replace"))
    return "utf-8" if codec in _UTF16_CODECS else codec


_LATIN_GUESSES = frozenset({
    "cp1250", "cp1252", "cp1254", "cp1257", "latin_1", "iso8859_2", "iso8859_9", "iso8859_15",
    "mac_roman", "mac_latin2",
})


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Decode an HTML body; returns (text, Python codec name). Never raises.

    Order: byte-order mark (it cannot be accidental, so it wins over the header as in
    browsers), the Content-Type charset, `<meta charset>`/`<meta http-equiv>` in the first 4 KB,
    strict UTF-8, a statistical detector, and finally UTF-8 with replacement characters.
    A declared charset the bytes do not decode in is skipped rather than trusted; a declared
    ISO-8859-1/windows-1252 (many servers' default) yields to UTF-8 when the body is valid
    UTF-8 with non-ASCII bytes, since Latin-1 text essentially never forms valid UTF-8.
    """
    bom = _bom(body)
    if bom is not None:
        codec, skip = bom
        return body[skip:].decode(codec, errors="replace"), codec

    declared: list[str] = []
    if content_type:
        match = _HEADER_CHARSET.search(content_type)
        header_codec = _codec(match.group(1)) if match else None
        if header_codec:
            declared.append(header_codec)
    meta_codec = _meta_charset(body)
    if meta_codec:
        declared.append(meta_codec)

    for codec in declared:
        if codec in _SINGLE_BYTE_DEFAULTS and not body.isascii():
            as_utf8 = _strict(body, "utf-8")
            if as_utf8 is not None:
                return as_utf8, "utf-8"
        text = _strict(body, codec)
        if text is not None:
            return text, codec

    as_utf8 = _strict(body, "utf-8")
    if as_utf8 is not None:
        return as_utf8, "utf-8"
    guess = charset_normalizer.from_bytes(body[:_DETECTOR_SAMPLE_BYTES]).best()
    detected = _codec(guess.encoding) if guess is not None else None
    if detected in _LATIN_GUESSES:
        # The detector cannot tell the Latin code pages apart on a page's worth of text (it
        # picked cp1250 for French windows-1252 text); an undeclared legacy page is
        # windows-1252 by the WHATWG default, which is what browsers show.
        detected = "cp1252"
    if detected is not None:
        return body.decode(detected, errors="replace"), detected
    return body.decode("utf-8", errors="replace"), "utf-8"


# --- Parsing --------------------------------------------------------------------------------

# Same parser settings as trafilatura's own loader, so the extractor sees the tree it would
# have built itself (comments and processing instructions dropped, no implied doctype).
# lxml parsers must not be shared between threads: one per thread.
_parsers = threading.local()


def _parser() -> HTMLParser:
    parser: HTMLParser | None = getattr(_parsers, "parser", None)
    if parser is None:
        parser = HTMLParser(
            collect_ids=False,
            default_doctype=False,
            encoding="utf-8",
            remove_comments=True,
            remove_pis=True,
        )
        _parsers.parser = parser
    return parser


# What remains of a document with no elements: whitespace, comments, doctype, XML declaration.
_NOTHING_BUT_PROLOG = re.compile(r"(\s|<!--.*?-->|<![^>]*>|<\?[^>]*>)*", re.DOTALL)


def _build_tree(text: str) -> HtmlElement | None:
    """The document's <html> element, or None for a document with no content at all."""
    try:
        try:
            return document_fromstring(text, parser=_parser())
        except ValueError:
            # lxml refuses str input that carries an XML encoding declaration; the text is
            # decoded already, so hand it over as UTF-8 (the parser is told the encoding).
            return document_fromstring(text.encode("utf-8"), parser=_parser())
    except etree.ParserError as exc:
        # libxml2 builds no document from an empty page: that is an empty page, not an error.
        if _NOTHING_BUT_PROLOG.fullmatch(text):
            return None
        raise PageParseError(f"lxml built no document from a non-empty page: {exc}") from exc
    except (etree.LxmlError, ValueError) as exc:
        raise PageParseError(f"lxml could not parse the page: {exc}") from exc


def _absolute(base: str, href: str, rejected: Counter[str] | None = None) -> str | None:
    """href resolved against base, or None if it is empty or not an http(s) URL (counted in
    `rejected` by reason)."""
    if not href or href.isspace():
        return None
    try:
        return resolve_url(href, base)
    except InvalidURL as exc:
        if rejected is not None:
            rejected[exc.reason] += 1
        return None


def _tokens(value: str | None) -> set[str]:
    if not value:
        return set()
    return {token for token in re.split(r"[\s,]+", value.lower()) if token}


@dataclass(frozen=True)
class _PageMarkup:
    title: str | None
    hrefs: tuple[str, ...]  # as written, in document order, nofollow ones left out
    canonical_href: str | None
    base_href: str | None
    noindex: bool
    nofollow: bool


class _MarkupWalk:
    """What the elements that carry links and page-level directives say, seen in document
    order; the same decisions for the lxml tree and the lexbor tree."""

    def __init__(self, agent: str | None) -> None:
        self._robots_names = {"robots"}
        if agent:
            self._robots_names.add(agent.strip().lower())
        self._title: str | None = None
        self._hrefs: list[str] = []
        self._canonical: str | None = None
        self._base: str | None = None
        self._directives: set[str] = set()

    def see(self, tag: str, get: Callable[[str], str | None], text: Callable[[], str]) -> None:
        if tag in ("a", "area"):
            href = get("href")
            if href is not None and "nofollow" not in _tokens(get("rel")):
                self._hrefs.append(href)
        elif tag == "link":
            href = get("href")
            rel = _tokens(get("rel"))
            if href is not None and "canonical" in rel:
                if self._canonical is None:
                    self._canonical = href
                if "nofollow" not in rel:
                    self._hrefs.append(href)
        elif tag == "meta":
            name = (get("name") or "").strip().lower()
            if name in self._robots_names:
                self._directives |= _tokens(get("content"))
        elif tag == "base":
            if self._base is None and get("href") is not None:
                self._base = get("href")
        elif tag == "title" and self._title is None:
            self._title = " ".join(text().split()) or None

    def markup(self) -> _PageMarkup:
        directives = self._directives
        return _PageMarkup(
            title=self._title,
            hrefs=tuple(self._hrefs),
            canonical_href=self._canonical,
            base_href=self._base,
            noindex="noindex" in directives or "none" in directives,
            nofollow="nofollow" in directives or "none" in directives,
        )


def _read_markup(tree: HtmlElement, agent: str | None) -> _PageMarkup:
    """One walk over the lxml elements that carry links and page-level directives."""
    walk = _MarkupWalk(agent)
    for element in tree.iter("a", "area", "link", "meta", "base", "title"):
        walk.see(element.tag, element.get, element.text_content)
    return walk.markup()


_LEXBOR_MARKUP = "a, area, link, meta, base, title, template"


def _walk_lexbor(root: LexborNode, walk: _MarkupWalk) -> None:
    for node in root.css(_LEXBOR_MARKUP):
        if node.tag == "template":
            # lexbor keeps a <template>'s content in a fragment of its own, outside the tree
            # css() searches; libxml2 parses it as ordinary children. Walking the fragment where
            # the template stands keeps the links in lxml's document order.
            for fragment in node.template_fragments():
                if fragment.parent is not None and fragment.parent.mem_id == node.mem_id:
                    _walk_lexbor(fragment, walk)
            continue
        attributes = node.attributes
        walk.see(node.tag, attributes.get, node.text)


def _read_lexbor_markup(tree: LexborHTMLParser, agent: str | None) -> _PageMarkup:
    """The same walk as _read_markup, over selectolax's lexbor tree."""
    walk = _MarkupWalk(agent)
    if tree.root is not None:
        _walk_lexbor(tree.root, walk)
    return walk.markup()


def _lexbor_tree_is_empty(tree: LexborHTMLParser) -> bool:
    """Whether lexbor found nothing but the html, head and body it implies by itself."""
    head, body = tree.head, tree.body
    return (tree.root is None
            or (body is not None and body.child is None and (head is None or head.child is None)))


# trafilatura.extract() keyword arguments, chosen on the benchmark (docs/extraction.md).
# favor_precision helps the full extractor but hurts the fast one, so each mode has its own.
TRAFILATURA_SETTINGS: Mapping[str, bool] = MappingProxyType(
    {"include_comments": False, "favor_precision": True}
)
TRAFILATURA_FAST_SETTINGS: Mapping[str, bool] = MappingProxyType(
    {"include_comments": False, "fast": True}
)
# resiliparse extract_plain_text() keyword arguments, chosen on the same benchmark
# (docs/extraction.md): the main content without comments, image alt texts, link targets,
# list bullets or form fields, none of which is the article's text.
RESILIPARSE_SETTINGS: Mapping[str, bool] = MappingProxyType({
    "main_content": True, "comments": False, "alt_texts": False, "links": False,
    "list_bullets": False, "form_fields": False,
})


def trafilatura_settings(fast: bool) -> Mapping[str, bool]:
    """The trafilatura.extract() keyword arguments parse_page uses in either mode."""
    return TRAFILATURA_FAST_SETTINGS if fast else TRAFILATURA_SETTINGS


def extract_main_text(tree: HtmlElement, url: str | None, *, fast: bool = False) -> str | None:
    """Main text of a parsed page (trafilatura works on its own copy of the tree), or None."""
    try:
        text = trafilatura.extract(tree, url=url, **trafilatura_settings(fast))
    except RecursionError as exc:
        raise PageParseError(f"text extraction failed on a too deeply nested page: {exc}") from exc
    return text or None


def resiliparse_text(html: str) -> str | None:
    """Main text of a decoded page by resiliparse (its own lexbor parse), or None. A text of
    nothing but whitespace (control characters such as U+001C included, which resiliparse
    passes through from a page of junk) is no text."""
    text = extract_plain_text(HTMLTree.parse(html), **RESILIPARSE_SETTINGS)
    return text if text and text.strip() else None


@dataclass(frozen=True, slots=True)
class Trafilatura:
    """The `trafilatura` and `trafilatura-fast` extractors: trafilatura on the lxml tree the
    links were read from."""

    fast: bool = False

    @property
    def name(self) -> str:
        return "trafilatura-fast" if self.fast else "trafilatura"

    def __call__(self, tree: HtmlElement, url: str) -> str | None:
        return extract_main_text(tree, url, fast=self.fast)


@dataclass(frozen=True, slots=True)
class Resiliparse:
    """The `resiliparse` extractor. parse_page hands it the decoded page, not an lxml tree, and
    reads links from a lexbor tree, so no lxml parse is made for a page."""

    name = "resiliparse"

    def __call__(self, tree: HtmlElement, url: str) -> str | None:
        # Called as a (tree, url) extractor outside parse_page (a composed pipeline that built
        # an lxml tree anyway): resiliparse needs markup, so the tree is serialised back.
        return resiliparse_text(tostring(tree, encoding="unicode"))

    def text_of(self, html: str) -> str | None:
        return resiliparse_text(html)


def extractor_named(name: str) -> Trafilatura | Resiliparse:
    """The extractor an `--extractor` choice names (pipeline.core.extractors.EXTRACTORS)."""
    if name in ("trafilatura", "trafilatura-fast"):
        return Trafilatura(fast=name == "trafilatura-fast")
    if name == "resiliparse":
        return Resiliparse()
    raise ValueError(f"unknown extractor {name!r}: use trafilatura, trafilatura-fast or "
                     "resiliparse")


def _page_links(url: str, markup: _PageMarkup
                ) -> tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]]:
    """(links, canonical, rejected) of a page's markup: resolved against `<base href>` if it
    has one, else the page's URL."""
    base = url
    if markup.base_href is not None:
        base = _absolute(url, markup.base_href) or url
    canonical = _absolute(base, markup.canonical_href) if markup.canonical_href else None
    links: tuple[str, ...] = ()
    rejected: Counter[str] = Counter()
    if not markup.nofollow:
        resolved = (_absolute(base, href, rejected) for href in markup.hrefs)
        links = tuple(dict.fromkeys(link for link in resolved if link is not None))
    return links, canonical, tuple(sorted(rejected.items()))


def parse_page(
    url: str,
    body: bytes,
    content_type: str | None,
    *,
    extract_text: bool = True,
    fast: bool = False,
    agent: str | None = None,
    extractor: Callable[[HtmlElement, str], str | None] | None = None,
) -> ParsedPage:
    """Decode and parse an HTML page once; read its links and meta, then extract its text.

    url: the page's final URL (links resolve against `<base href>` if present, else this).
    agent: the crawler's robots name; `<meta name=AGENT>` directives apply like `robots`.
    fast: trafilatura's faster heuristics (the `trafilatura-fast` extractor).
    extractor: Resiliparse() for resiliparse's text and lexbor's links, or any main-text
        extractor called with the lxml tree and the URL (Trafilatura(fast) is the default).
    Raises PageParseError if the response is not HTML or no document can be made of it;
    an empty document is an empty page, not an error.
    """
    if not is_html(content_type, body):
        raise PageParseError(
            f"not an HTML page (content type {content_type!r}); check is_html() before parsing"
        )
    text, charset = decode_html(body, content_type)
    if isinstance(extractor, Resiliparse):
        return _parse_with_lexbor(url, text, charset, extractor, extract_text, agent)
    tree = _build_tree(text)
    if tree is None:
        return ParsedPage(None, None, (), None, noindex=False, nofollow=False, charset=charset)

    markup = _read_markup(tree, agent)
    page_text = None
    if extract_text and not markup.noindex:
        page_text = (
            extractor(tree, url) if extractor is not None
            else extract_main_text(tree, url, fast=fast)
        ) or None
    return _parsed_page(url, markup, charset, page_text)


def _parse_with_lexbor(url: str, text: str, charset: str, extractor: Resiliparse,
                       extract_text: bool, agent: str | None) -> ParsedPage:
    """parse_page with links from selectolax's lexbor tree and resiliparse's text."""
    try:
        tree = LexborHTMLParser(text)
    except (UnicodeError, ValueError) as exc:
        raise PageParseError(f"lexbor could not parse the page: {exc}") from exc
    if _lexbor_tree_is_empty(tree) and _build_tree(text) is None:
        # lexbor makes a document of anything; libxml2 refuses a page that is nothing but an
        # unterminated comment or tag. Asking lxml on such (tiny or comment-only) pages keeps
        # one decision for every extractor on which page is empty and which cannot be parsed.
        return ParsedPage(None, None, (), None, noindex=False, nofollow=False, charset=charset)
    markup = _read_lexbor_markup(tree, agent)
    page_text = None
    if extract_text and not markup.noindex:
        page_text = extractor.text_of(text)
    return _parsed_page(url, markup, charset, page_text)


def _parsed_page(url: str, markup: _PageMarkup, charset: str,
                 page_text: str | None) -> ParsedPage:
    """The page from its markup, read by either parser, and its text: links resolved and
    filtered by the same rules whichever tree they came from."""
    links, canonical, rejected = _page_links(url, markup)
    return ParsedPage(
        text=page_text,
        title=markup.title,
        links=links,
        canonical=canonical,
        noindex=markup.noindex,
        nofollow=markup.nofollow,
        charset=charset,
        rejected_links=rejected,
    )
