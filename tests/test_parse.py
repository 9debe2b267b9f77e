"""Page parsing: links, robots meta, charsets, robustness, and text quality on real pages."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.parse import PageParseError, ParsedPage, decode_html, is_html, parse_page
from testweb.quality import compare_extraction, load_benchmark, shared_data_dir, token_f1

PAGE_URL = "http://example.test/dir/page.html"

ARTICLE = " ".join(
    f"Sentence number {i} of the article talks about crawling the web politely and at scale."
    for i in range(40)
)


def html_page(head: str = "", body: str = "") -> bytes:
    return (
        f"<!DOCTYPE html><html><head><title>Test page</title>{head}</head>"
        f"<body>{body}</body></html>"
    ).encode()


def links_of(body: str, head: str = "", url: str = PAGE_URL) -> tuple[str, ...]:
    return parse_page(url, html_page(head, body), "text/html", extract_text=False).links


# --- Links ------------------------------------------------------------------------------------


def test_relative_and_absolute_links_resolve_against_the_page_url() -> None:
    links = links_of(
        '<a href="other.html">o</a><a href="/root">r</a><a href="../up">u</a>'
        '<a href="//cdn.test/x">c</a><a href="https://abs.test/y?q=1">a</a>'
        '<a href="?page=2">q</a>'
    )
    assert links == (
        "http://example.test/dir/other.html",
        "http://example.test/root",
        "http://example.test/up",
        "http://cdn.test/x",
        "https://abs.test/y?q=1",
        "http://example.test/dir/page.html?page=2",
    )


def test_base_href_replaces_the_page_url_for_resolution() -> None:
    links = links_of(
        '<a href="a.html">a</a><a href="/b">b</a>', head='<base href="https://mirror.test/docs/">'
    )
    assert links == ("https://mirror.test/docs/a.html", "https://mirror.test/b")


def test_relative_base_href_resolves_against_the_page_url_and_only_the_first_counts() -> None:
    links = links_of(
        '<a href="a.html">a</a>', head='<base href="/other/"><base href="http://ignored.test/">'
    )
    assert links == ("http://example.test/other/a.html",)


def test_rel_nofollow_links_are_left_out() -> None:
    links = links_of(
        '<a href="/kept">k</a><a rel="nofollow" href="/dropped">d</a>'
        '<a rel="ugc NoFollow" href="/dropped2">d</a><a rel="noopener" href="/kept2">k</a>'
    )
    assert links == ("http://example.test/kept", "http://example.test/kept2")


def test_fragments_are_kept_and_exact_repeats_dropped_in_document_order() -> None:
    links = links_of(
        '<a href="#top">t</a><a href="/b#s">b</a><a href="/c">c</a><a href="/b#s">again</a>'
        '<a href="/c">again</a><area href="/map">'
    )
    assert links == (
        "http://example.test/dir/page.html#top",
        "http://example.test/b#s",
        "http://example.test/c",
        "http://example.test/map",
    )


def test_non_http_hrefs_are_skipped() -> None:
    links = links_of(
        '<a href="javascript:void(0)">j</a><a href=" JavaScript:alert(1)">j</a>'
        '<a href="mailto:a@b.test">m</a><a href="tel:+123">t</a>'
        '<a href="data:text/html,hi">d</a><a href="ftp://files.test/x">f</a>'
        '<a href="">empty</a><a>no href</a><a href="http://[broken">bad</a><a href="/ok">ok</a>'
    )
    assert links == ("http://example.test/ok",)


def test_links_resolve_as_browsers_resolve_them() -> None:
    links = links_of(
        '<a href="sub\\page.htm">b</a><a href="///other.test/p">s</a>'
        '<a href="https:secure.test/x">h</a><a href="http://0x7f.1/n">n</a>'
        '<a href="http:same">r</a>'
    )
    assert links == (
        "http://example.test/dir/sub/page.htm",
        "http://other.test/p",
        "https://secure.test/x",
        "http://127.0.0.1/n",
        "http://example.test/dir/same",
    )


def test_rejected_hrefs_are_counted_by_reason() -> None:
    page = parse_page(PAGE_URL, html_page("", (
        '<a href="mailto:a@b.test">m</a><a href="javascript:void(0)">j</a>'
        '<a href="ftp://files.test/x">f</a><a href="http://1.2.3.08/">n</a>'
        '<a href="http://[broken">v</a><a href="http://a.test:99999/">p</a>'
        '<a href="">empty: the page itself</a><a rel="nofollow" href="mailto:c@d.test">x</a>'
        '<a href="/ok">ok</a>'
    )), "text/html", extract_text=False)
    assert page.links == ("http://example.test/ok",)
    assert page.rejected_links == (("host", 2), ("port", 1), ("scheme", 3))


def test_canonical_is_reported_and_is_one_of_the_links() -> None:
    page = parse_page(
        PAGE_URL,
        html_page('<link rel="canonical" href="/canonical-page">', '<a href="/x">x</a>'),
        "text/html",
        extract_text=False,
    )
    assert page.canonical == "http://example.test/canonical-page"
    assert page.links == ("http://example.test/canonical-page", "http://example.test/x")


def test_title_is_whitespace_collapsed() -> None:
    body = b"<html><head><title>\n  A   title\t here </title></head><body>x</body></html>"
    assert parse_page(PAGE_URL, body, "text/html", extract_text=False).title == "A title here"


# --- Meta robots ------------------------------------------------------------------------------


def test_meta_robots_noindex_keeps_links_but_no_text() -> None:
    page = parse_page(
        PAGE_URL,
        html_page('<meta name="robots" content="noindex">', f'<p>{ARTICLE}</p><a href="/x">x</a>'),
        "text/html",
    )
    assert page.noindex and not page.nofollow
    assert page.text is None
    assert page.links == ("http://example.test/x",)


def test_meta_robots_nofollow_empties_links_but_keeps_canonical_and_text() -> None:
    page = parse_page(
        PAGE_URL,
        html_page(
            '<meta name="ROBOTS" content="NOFOLLOW"><link rel="canonical" href="/c">',
            f'<p>{ARTICLE}</p><a href="/x">x</a>',
        ),
        "text/html",
    )
    assert page.nofollow and not page.noindex
    assert page.links == ()
    assert page.canonical == "http://example.test/c"
    assert page.text is not None and "crawling the web politely" in page.text


def test_meta_robots_none_means_noindex_and_nofollow() -> None:
    page = parse_page(
        PAGE_URL,
        html_page('<meta name="robots" content="none">', '<a href="/x">x</a>'),
        "text/html",
    )
    assert page.noindex and page.nofollow and page.links == () and page.text is None


def test_meta_for_other_crawlers_is_ignored_and_our_agent_name_is_obeyed() -> None:
    body = html_page(
        '<meta name="googlebot" content="noindex, nofollow">'
        '<meta name="beamcrawler" content="nofollow">',
        '<a href="/x">x</a>',
    )
    plain = parse_page(PAGE_URL, body, "text/html", extract_text=False)
    assert not plain.noindex and not plain.nofollow and plain.links
    ours = parse_page(PAGE_URL, body, "text/html", extract_text=False, agent="BeamCrawler")
    assert ours.nofollow and not ours.noindex and ours.links == ()


# --- Text ---------------------------------------------------------------------------------------


def test_main_text_is_extracted_without_navigation() -> None:
    body = html_page(
        "",
        '<nav><a href="/a">Home</a> <a href="/b">About us</a></nav>'
        f"<article><h1>Headline</h1><p>{ARTICLE}</p></article>"
        "<footer>Copyright footer text</footer>",
    )
    page = parse_page(PAGE_URL, body, "text/html")
    assert page.text is not None
    assert "Sentence number 39 of the article" in page.text
    assert "Copyright footer text" not in page.text


def test_extract_text_false_skips_extraction() -> None:
    page = parse_page(PAGE_URL, html_page("", f"<p>{ARTICLE}</p>"), "text/html", extract_text=False)
    assert page.text is None and page.title == "Test page"


# --- Charsets -----------------------------------------------------------------------------------


def test_iso_8859_1_from_meta_decodes_as_windows_1252() -> None:
    body = (
        '<html><head><meta http-equiv="Content-Type" content="text/html; '
        'charset=iso-8859-1"><title>Café “quoted”</title></head><body>x</body></html>'
    )
    page = parse_page(PAGE_URL, body.encode("cp1252"), "text/html", extract_text=False)
    assert page.charset == "cp1252"
    assert page.title == "Café “quoted”"


def test_windows_1252_from_header() -> None:
    text, charset = decode_html(
        "naïve – “quotes” €".encode("cp1252"), "text/html; charset=windows-1252"
    )
    assert (text, charset) == ("naïve – “quotes” €", "cp1252")


def test_shift_jis_from_header() -> None:
    body = "<html><head><title>日本語のページ</title></head><body>こんにちは</body></html>"
    page = parse_page(
        PAGE_URL, body.encode("shift_jis"), 'text/html; charset="Shift_JIS"', extract_text=False
    )
    assert page.charset == "cp932"
    assert page.title == "日本語のページ"


def test_utf8_bom_wins_over_a_contradicting_header() -> None:
    body = codecs.BOM_UTF8 + "<html><head><title>Zürich</title></head></html>".encode()
    page = parse_page(PAGE_URL, body, "text/html; charset=iso-8859-1", extract_text=False)
    assert page.charset == "utf-8"
    assert page.title == "Zürich"


def test_utf16_bom() -> None:
    text, charset = decode_html(codecs.BOM_UTF16_LE + "<p>Grüße</p>".encode("utf-16-le"), None)
    assert (text, charset) == ("<p>Grüße</p>", "utf-16-le")


def test_header_charset_the_bytes_contradict_yields_to_meta() -> None:
    body = '<html><head><meta charset="windows-1252"><title>Señor</title></head></html>'
    page = parse_page(
        PAGE_URL, body.encode("cp1252"), "text/html; charset=utf-8", extract_text=False
    )
    assert page.charset == "cp1252"
    assert page.title == "Señor"


def test_latin1_default_header_on_a_utf8_page_decodes_as_utf8() -> None:
    text, charset = decode_html(
        "<p>Ελληνικά and café</p>".encode(), "text/html; charset=ISO-8859-1"
    )
    assert (text, charset) == ("<p>Ελληνικά and café</p>", "utf-8")


def test_unknown_and_dangerous_charset_labels_are_ignored() -> None:
    assert decode_html("é".encode(), "text/html; charset=no-such-charset") == ("é", "utf-8")
    assert decode_html(b"abc", "text/html; charset=base64") == ("abc", "utf-8")
    assert decode_html(b"+ADw-script", "text/html; charset=utf-7") == ("+ADw-script", "utf-8")


def test_undeclared_non_utf8_body_goes_to_the_detector() -> None:
    original = "Привет, мир! Это страница на русском языке. " * 20
    text, charset = decode_html(original.encode("cp1251"), None)
    assert charset != "utf-8"
    assert "Привет" in text


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=2000),
    st.sampled_from(
        [None, "text/html", "text/html; charset=utf-8", "text/html; charset=shift_jis", "bogus"]
    ),
)
def test_decode_html_never_raises(body: bytes, content_type: str | None) -> None:
    text, charset = decode_html(body, content_type)
    assert isinstance(text, str)
    assert codecs.lookup(charset)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000))
def test_garbage_bytes_served_as_html_raise_nothing_but_page_parse_error(body: bytes) -> None:
    try:
        page = parse_page(PAGE_URL, body, "text/html")
    except PageParseError as exc:
        assert "lxml" in str(exc)
    else:
        assert all(link.startswith(("http://", "https://")) for link in page.links)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="<>/=\"' abhtmlrefp!-&;#\n", max_size=400))
def test_malformed_markup_parses(markup: str) -> None:
    page = parse_page(PAGE_URL, f"<html><body>{markup}".encode(), "text/html")
    assert all(link.startswith(("http://", "https://")) for link in page.links)


def test_a_body_lxml_builds_nothing_from_raises_page_parse_error() -> None:
    with pytest.raises(PageParseError, match="lxml built no document"):
        parse_page(PAGE_URL, b"<html", "text/html")


@pytest.mark.parametrize(
    "body", [b"", b"   \n", b"<!DOCTYPE html>", b"<!-- nothing here -->", b"<?xml version='1.0'?>"]
)
def test_empty_documents_are_empty_pages(body: bytes) -> None:
    page = parse_page(PAGE_URL, body, "text/html")
    assert page == ParsedPage(None, None, (), None, noindex=False, nofollow=False, charset="utf-8")


def test_xml_declaration_with_encoding_is_parsed() -> None:
    body = (
        '<?xml version="1.0" encoding="iso-8859-1"?><html xmlns="http://www.w3.org/1999/xhtml">'
        '<head><title>Été</title></head><body><a href="/x">x</a></body></html>'
    )
    page = parse_page(PAGE_URL, body.encode("latin-1"), "application/xhtml+xml", extract_text=False)
    assert page.title == "Été"
    assert page.links == ("http://example.test/x",)


# --- Content type -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/html", b"anything", True),
        ("TEXT/HTML; charset=utf-8", b"", True),
        ("application/xhtml+xml", b"<?xml version='1.0'?><html/>", True),
        ("application/pdf", b"%PDF-1.7", False),
        ("image/png", b"<html>", False),
        ("text/plain", b"<html>", False),
        (None, b"  \n<!DOCTYPE html><html>", True),
        (None, codecs.BOM_UTF8 + b"<html lang=en>", True),
        (None, b"<p>para", True),
        (None, b"<!-- comment --><div>", True),
        ("", b"<?xml version='1.0'?>\n<html xmlns='http://www.w3.org/1999/xhtml'>", True),
        (None, b"%PDF-1.7 binary", False),
        (None, b"\x89PNG\r\n", False),
        (None, b"<pre-tag-lookalike>", False),
        ("application/unknown", b"<html>", True),
        (None, b"", False),
    ],
)
def test_is_html(content_type: str | None, body: bytes, expected: bool) -> None:
    assert is_html(content_type, body) is expected


def test_non_html_is_refused_with_a_reason() -> None:
    with pytest.raises(PageParseError, match="not an HTML page"):
        parse_page(PAGE_URL, b"%PDF-1.7\n...", "application/pdf")


# --- Quality ------------------------------------------------------------------------------------


def test_token_f1() -> None:
    assert token_f1("The cat sat.", "the CAT sat") == (1.0, 1.0, 1.0)
    precision, recall, f1 = token_f1("a b c d", "a b")
    assert (precision, recall) == (0.5, 1.0)
    assert f1 == pytest.approx(2 / 3)
    assert token_f1("a a a", "a") == (1 / 3, 1.0, 0.5)  # multisets: repeats are not free
    assert token_f1("", "") == (1.0, 1.0, 1.0)
    assert token_f1("", "x") == (0.0, 0.0, 0.0)
    assert token_f1("y", "x") == (0.0, 0.0, 0.0)


def test_parse_page_text_scores_what_trafilatura_scores_alone_on_real_pages() -> None:
    data_dir = shared_data_dir()
    if not (data_dir / "article-extraction-benchmark").is_dir():
        pytest.skip(f"benchmark pages not found under {data_dir} (set CRAWLER_SHARED_DATA)")
    comparison = compare_extraction(load_benchmark(data_dir, limit=30))
    assert comparison.pages >= 25
    assert comparison.parse_page_f1 == pytest.approx(comparison.standalone_f1, abs=0.005)
    assert comparison.parse_page_f1 > 0.9
