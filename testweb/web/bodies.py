"""How pages and resources become bytes: the HTML of a page, error pages, PDFs, PNGs, gzip
files and a gzip bomb."""

from __future__ import annotations

import random
import struct
import zlib
from html import escape

from testweb.web.model import Link, Response, _Page
from testweb.web.prose import _ADJECTIVES, _NOUNS, _change_words, _paragraph, _person, _sentence
from testweb.web.spec import PageFault


def _a(link: Link) -> str:
    rel = f' rel="{link.rel}"' if link.rel else ""
    return f'<a href="{escape(link.href)}"{rel}>{escape(link.text)}</a>'


def _main_html(page: _Page, rng: random.Random, key: str, native: str,
               house: random.Random | None = None, edits: random.Random | None = None) -> str:
    main_links = [link for link in page.links if link.area == "main"]
    story = page.template == "story"
    count = page.paragraphs or (rng.randint(6, 8) if story else rng.randint(3, 5))
    paragraphs = [_paragraph(rng) for _ in range(count)]
    paragraphs[0] = _paragraph(rng, key)
    paragraphs[1] = _paragraph(rng, native)
    if edits is not None:
        _change_words(paragraphs, page.edits, edits)
    byline = f"By {_person(rng)}, {rng.randint(1, 28)} March 2026"
    out = [f"<h1>{escape(page.title)}</h1>"]
    if story:
        # Every story of a host opens and closes alike, so different stories look alike too.
        byline = f"{byline.rpartition(', ')[0]}, {page.dateline}"
        house = house or random.Random(0)
        paragraphs = [_paragraph(house), *paragraphs, _paragraph(house)]
    if page.template in ("thread",):
        for number, text in enumerate(paragraphs, 1):
            out.append(
                f'<div class="post" id="post-{number}"><div class="author">{_person(rng)}'
                f'</div><div class="post-body"><p>{escape(text)}</p></div></div>'
            )
    elif page.template == "product":
        out.append(f'<p class="price">Price: EUR {rng.randint(5, 400)}.{rng.randint(0, 99):02d}'
                   "</p>")
        out.append('<table class="specs">' + "".join(
            f"<tr><th>{escape(rng.choice(_NOUNS)).capitalize()}</th>"
            f"<td>{escape(rng.choice(_ADJECTIVES))}</td></tr>" for _ in range(4)) + "</table>")
        out.extend(f"<p>{escape(text)}</p>" for text in paragraphs)
    else:
        out.append(f'<p class="byline">{escape(byline)}</p>')
        out.extend(f"<p>{escape(text)}</p>" for text in paragraphs)
    if main_links:
        if page.template in ("home", "listing", "calendar"):
            items = "".join(
                f"<li><h2>{_a(link)}</h2><p>{escape(_sentence(rng))}</p></li>"
                for link in main_links)
            out.append(f'<ul class="items">{items}</ul>')
        else:
            items = "".join(f"<li>{_a(link)}</li>" for link in main_links)
            out.append(f'<ul class="see-also">{items}</ul>')
    return "\n".join(out)


def _layout(page: _Page, host: str, main: str, rng: random.Random) -> str:
    head = []
    if page.fault in (PageFault.WRONG_CHARSET, PageFault.MISSING_CHARSET):
        pass  # the header is all a crawler gets (wrong, or no charset at all)
    elif page.charset == "utf-8":
        head.append('<meta charset="utf-8">')
    elif page.charset == "windows-1252":
        head.append('<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">')
    if page.base_href:
        head.append(f'<base href="{escape(page.base_href)}">')
    head.append(f"<title>{escape(page.title)} | {host}</title>")
    head.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    if page.meta_robots:
        head.append(f'<meta name="robots" content="{page.meta_robots}">')
    if page.canonical:
        head.append(f'<link rel="canonical" href="{escape(page.canonical)}">')
    # Not links: a crawler must not follow stylesheets, scripts or images.
    head.append('<link rel="stylesheet" href="/static/site.css">')
    nav = "".join(f"<li>{_a(link)}</li>" for link in page.links if link.area == "nav")
    aside = "".join(f"<li>{_a(link)}</li>" for link in page.links if link.area == "aside")
    footer = " | ".join(_a(link) for link in page.links if link.area == "footer")
    cookie = ("We use cookies to remember your settings. By continuing you accept our "
              "cookie policy.")
    body_class = escape(page.template)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
{chr(10).join(head)}
</head>
<body class="{body_class}">
<div class="cookie-banner">{cookie}</div>
<header class="site-header">
<div class="logo"><img src="/static/logo.png" alt="{escape(host)}"></div>
<nav class="main-nav"><ul>{nav}</ul></nav>
<form class="search" action="/search"><input name="q"><button>Search</button></form>
</header>
<main id="content">
<article>
{main}
</article>
<aside class="related"><h3>Related</h3><ul>{aside}</ul></aside>
</main>
<footer class="site-footer">
<p>{footer}</p>
<p>(c) 2026 {escape(host)}. All rights reserved. Build {rng.randrange(1000, 9999)}.</p>
</footer>
<script src="/static/site.js"></script>
</body>
</html>
"""


def _error_html(message: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{escape(message)}</title></head>"
            f"<body><h1>{escape(message)}</h1></body></html>\n").encode()


def _html_response(status: int, body: bytes) -> Response:
    return Response(status, (("Content-Type", "text/html; charset=utf-8"),), body)


def _text_response(status: int, text: str) -> Response:
    return Response(status, (("Content-Type", "text/plain; charset=utf-8"),), text.encode())


def _pdf_bytes(text: str) -> bytes:
    """A small, valid one-page PDF showing `text`."""
    safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def _png_bytes(comment: str, rng: random.Random) -> bytes:
    """A valid 16x16 RGB PNG with a tEXt comment, so every image's bytes differ."""
    width = height = 16

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    colour = bytes(rng.randrange(256) for _ in range(3))
    raw = b"".join(b"\x00" + colour * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"tEXt", b"Comment\x00" + comment.encode())
            + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def _gzip_bytes(data: bytes) -> bytes:
    """`data` as a gzip file (mtime 0, so the bytes are the same on every run)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_bomb(head: bytes, size: int) -> bytes:
    """A gzip member decoding to `head` and then spaces, `size` bytes in all (~1/1000 of it).

    Built from independently compressed blocks (a full flush resets the compressor's window),
    so a 64 MiB bomb costs one 1 MiB compression and a CRC pass instead of 64 MiB compressed.
    """
    block = b" " * (1 << 20)
    blocks, rest = divmod(max(0, size - len(head)), len(block))
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH)
    middle = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    last = compressor.compress(block[:rest]) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()
    crc = zlib.crc32(head)
    for _ in range(blocks):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(block[:rest], crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, no mtime
    trailer = struct.pack("<II", crc, (len(head) + blocks * len(block) + rest) & 0xFFFFFFFF)
    return header + first + middle * blocks + last + end + trailer
