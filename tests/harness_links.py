"""The links a page carries, read independently of the crawler's parser: what the synthetic
web's tests hold its pages to."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import lxml.html

# Session-id parameters the crawler drops, named here apart from the crawler's own list.
SESSION_PARAMETERS = {"sid", "sessionid", "session_id", "jsessionid", "phpsessid",
                      "aspsessionid"}


def normalise_url(url: str) -> str:
    """The crawler's normal form, written out independently of the web's own model: tracking
    and session-id parameters dropped (session ids also as ;jsessionid= path parameters)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    netloc = host if parts.port in (None, 80) else f"{host}:{parts.port}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not k.startswith("utm_") and k.lower() not in SESSION_PARAMETERS]
    query.sort(key=lambda kv: kv[0])
    path = "/".join(segment.split(";jsessionid=")[0] for segment in parts.path.split("/"))
    return urlunsplit((parts.scheme.lower(), netloc, path or "/", urlencode(query), ""))


def extract_links(url: str, body: bytes, charset: str) -> tuple[set[str], list[str]]:
    doc = lxml.html.fromstring(body.decode(charset))
    base = url
    for element in doc.iter("base"):
        base = urljoin(url, element.get("href", ""))
        break
    hrefs = [a.get("href") for a in doc.iter("a") if a.get("href") is not None]
    robots = " ".join(m.get("content", "") for m in doc.iter("meta")
                      if m.get("name", "").lower() == "robots").lower()
    if "nofollow" in robots:
        return set(), hrefs
    found = {normalise_url(urljoin(base, a.get("href"))) for a in doc.iter("a")
             if a.get("href") is not None and "nofollow" not in (a.get("rel") or "").split()}
    found |= {normalise_url(urljoin(base, link.get("href"))) for link in doc.iter("link")
              if link.get("rel") == "canonical"}
    return found, hrefs
