"""FetchClient against small servers on 127.0.0.1: answers, deadlines, caps, DNS, TLS."""

from __future__ import annotations

import datetime
import gzip
import http.server
import socket
import ssl
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.io.dns import ResolveOverride, Resolver
from pipeline.io.fetch import (
    ERROR_CONNECT_REFUSED,
    ERROR_DNS,
    ERROR_INVALID_URL,
    ERROR_PROTOCOL,
    ERROR_TIMEOUT,
    ERROR_TLS,
    FetchClient,
    FetchConfig,
)

UA = "test-crawler/0.1 (+http://crawler.test/about)"
BOMB_DECODED = 64 * 1024 * 1024


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    parts = [compressor.compress(zeros) for _ in range(BOMB_DECODED // len(zeros))]
    parts.append(compressor.flush())
    return b"".join(parts)


class Site:
    """What the test server saw, and a switch that frees handlers told to stall."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None]] = []  # (path, Host header)
        self.connections = 0
        self.sni: list[str | None] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.bomb = b""


def _handler(site: Site) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes

        def setup(self) -> None:
            super().setup()
            with site.lock:
                site.connections += 1

        def log_message(self, format: str, *args: object) -> None:
            pass

        def answer(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with site.lock:
                site.requests.append((self.path, self.headers.get("Host")))
            route = self.path
            if route == "/ok":
                cookies = (("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"))
                self.answer(200, b"hello, crawler", (("Content-Type", "text/html"), *cookies))
            elif route == "/echo-headers":
                self.answer(200, str(self.headers).encode())
            elif route == "/missing":
                self.answer(404, b"no such page")
            elif route == "/error":
                self.answer(500, b"broken")
            elif route == "/moved":
                self.answer(301, b"", (("Location", "/ok"),))
            elif route == "/big":
                self.answer(200, b"x" * 100_000)
            elif route == "/exact":
                self.answer(200, b"y" * 1000)
            elif route == "/gzip":
                self.answer(200, gzip.compress(b"<p>zipped</p>" * 100),
                            (("Content-Encoding", "gzip"),))  # fmt: skip
            elif route == "/deflate-raw":
                compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
                body = compressor.compress(b"raw deflate " * 50) + compressor.flush()
                self.answer(200, body, (("Content-Encoding", "deflate"),))
            elif route == "/bomb":
                self.answer(200, site.bomb, (("Content-Encoding", "gzip"),))
            elif route == "/chunked-gzip":
                self.send_response(200)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                data = gzip.compress(b"chunk " * 5000)
                for i in range(0, len(data), 1000):
                    piece = data[i : i + 1000]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            elif route == "/stall-body":
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(b"z" * 10)
                self.wfile.flush()
                site.release.wait(10)
                self.close_connection = True
            elif route == "/trickle-body":
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(500):
                    if site.release.wait(0.02):
                        break
                    self.wfile.write(b"t")
                    self.wfile.flush()
                self.close_connection = True
            elif route == "/hang":
                site.release.wait(10)
                self.close_connection = True
            elif route == "/trickle-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(500):
                    if site.release.wait(0.02):
                        break
                    self.wfile.write(b"X")
                    self.wfile.flush()
                self.close_connection = True
            else:
                self.answer(418, b"unknown route")

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs of parallel fetches: 1 s retransmits


def _serve(site: Site, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    server = _Server(("127.0.0.1", 0), _handler(site))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        site.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _gzip_bomb()


@pytest.fixture
def site(bomb: bytes) -> Site:
    site = Site()
    site.bomb = bomb
    return site


@pytest.fixture
def port(site: Site) -> Iterator[int]:
    yield from _serve(site)


def _client(port: int, **config: object) -> FetchClient:
    overrides = [
        ResolveOverride("a.test", port, "127.0.0.1"),
        ResolveOverride("*.test", None, "127.0.0.1"),
    ]

    def no_dns(host: str, port: int) -> str:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    return FetchClient(FetchConfig(user_agent=UA, **config), Resolver(overrides, lookup=no_dns))  # type: ignore[arg-type]


def test_200_with_body_headers_and_ip(port: int, site: Site) -> None:
    response = _client(port).fetch(f"http://a.test:{port}/ok")
    assert response.status == 200
    assert response.body == b"hello, crawler"
    assert response.error is None and not response.truncated
    assert response.ip == "127.0.0.1"
    assert response.header("content-type") == "text/html"
    assert [v for k, v in response.headers if k.lower() == "set-cookie"] == ["a=1", "b=2"]
    assert 0 <= response.elapsed < 5
    assert abs(response.started_at - time.time()) < 5


def test_host_header_carries_url_host_while_connecting_to_override(port: int, site: Site) -> None:
    response = _client(port).fetch(f"http://a.test:{port}/echo-headers")
    sent = response.body.decode().lower()
    assert f"host: a.test:{port}" in sent
    assert f"user-agent: {UA}".lower() in sent
    assert "accept-encoding: gzip, deflate" in sent
    assert "cookie" not in sent
    assert site.requests == [("/echo-headers", f"a.test:{port}")]


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/error", 500)])
def test_http_errors_are_answers_not_errors(port: int, path: str, status: int) -> None:
    response = _client(port).fetch(f"http://a.test:{port}{path}")
    assert response.status == status
    assert response.error is None
    assert response.body


def test_redirect_is_returned_not_followed(port: int, site: Site) -> None:
    response = _client(port).fetch(f"http://a.test:{port}/moved")
    assert response.status == 301
    assert response.header("Location") == "/ok"
    assert [path for path, _ in site.requests] == ["/moved"]


def test_keep_alive_connection_is_reused(port: int, site: Site) -> None:
    client = _client(port)
    for _ in range(3):
        assert client.fetch(f"http://a.test:{port}/ok").status == 200
    assert site.connections == 1


def test_connection_closed_after_truncation_is_not_reused(port: int, site: Site) -> None:
    client = _client(port, max_body_bytes=1000)
    assert client.fetch(f"http://a.test:{port}/big").truncated
    assert client.fetch(f"http://a.test:{port}/ok").body == b"hello, crawler"
    assert site.connections == 2


def test_total_deadline_on_a_server_that_stalls_mid_body(port: int) -> None:
    client = _client(port, timeout=0.5)
    began = time.monotonic()
    response = client.fetch(f"http://a.test:{port}/stall-body")
    took = time.monotonic() - began
    assert response.error == ERROR_TIMEOUT
    assert response.status == 200
    assert response.body == b"z" * 10
    assert response.truncated
    assert 0.5 <= took < 0.5 + 0.4


def test_total_deadline_on_a_server_that_trickles_the_body(port: int) -> None:
    client = _client(port, timeout=0.4)
    began = time.monotonic()
    response = client.fetch(f"http://a.test:{port}/trickle-body")
    assert time.monotonic() - began < 0.4 + 0.4
    assert response.error == ERROR_TIMEOUT
    assert 0 < len(response.body) < 100


def test_total_deadline_on_a_server_that_hangs_before_headers(port: int) -> None:
    client = _client(port, timeout=0.4)
    began = time.monotonic()
    response = client.fetch(f"http://a.test:{port}/hang")
    assert time.monotonic() - began < 0.4 + 0.4
    assert response.status is None
    assert response.error == ERROR_TIMEOUT
    assert response.ip == "127.0.0.1"


def test_total_deadline_on_a_server_that_trickles_headers(port: int) -> None:
    client = _client(port, timeout=0.4)
    began = time.monotonic()
    response = client.fetch(f"http://a.test:{port}/trickle-headers")
    assert time.monotonic() - began < 0.4 + 0.4
    assert response.error == ERROR_TIMEOUT


def test_connect_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    response = _client(closed_port).fetch(f"http://a.test:{closed_port}/")
    assert response.status is None
    assert response.error == ERROR_CONNECT_REFUSED
    assert response.ip == "127.0.0.1"
    assert response.error_detail and "refused" in response.error_detail


def test_body_over_the_cap_is_truncated(port: int) -> None:
    response = _client(port, max_body_bytes=1000).fetch(f"http://a.test:{port}/big")
    assert response.status == 200
    assert response.truncated and response.error is None
    assert response.body == b"x" * 1000


def test_body_exactly_at_the_cap_is_whole(port: int) -> None:
    response = _client(port, max_body_bytes=1000).fetch(f"http://a.test:{port}/exact")
    assert not response.truncated
    assert response.body == b"y" * 1000


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/gzip", b"<p>zipped</p>" * 100),
        ("/deflate-raw", b"raw deflate " * 50),
        ("/chunked-gzip", b"chunk " * 5000),
    ],
)
def test_content_encoding_is_decoded(port: int, path: str, expected: bytes) -> None:
    response = _client(port).fetch(f"http://a.test:{port}{path}")
    assert response.error is None
    assert response.body == expected


def test_gzip_bomb_is_capped_on_decoded_size(port: int, bomb: bytes) -> None:
    cap = 1024 * 1024
    client = _client(port, max_body_bytes=cap)
    tracemalloc.start()
    try:
        response = client.fetch(f"http://a.test:{port}/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(bomb) < cap  # the whole compressed body would fit under the cap
    assert response.truncated and response.error is None
    assert response.body == bytes(cap)
    assert peak < 8 * cap  # decoding all of it would take 64 MiB


def test_unknown_host_is_a_dns_error(port: int) -> None:
    response = _client(port).fetch("http://unknown.example/")
    assert response.status is None
    assert response.error == ERROR_DNS
    assert response.ip is None
    assert response.error_detail and "unknown.example" in response.error_detail


def test_ip_literal_urls_need_no_dns(port: int, site: Site) -> None:
    # Loopback is not public: only an allowed range lets a literal address reach it.
    response = _client(port, allow_networks=("127.0.0.0/8",)).fetch(f"http://127.0.0.1:{port}/ok")
    assert (response.status, response.ip) == (200, "127.0.0.1")
    assert site.requests == [("/ok", f"127.0.0.1:{port}")]


@pytest.mark.parametrize("url", ["ftp://a.test/file", "not a url", "http:///nohost"])
def test_unusable_urls_are_reported(url: str) -> None:
    response = _client(1).fetch(url)
    assert response.status is None
    assert response.error == ERROR_INVALID_URL


def test_garbage_instead_of_http_is_a_protocol_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def reply_garbage() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH\r\nnot http at all\r\n\r\n")

        thread = threading.Thread(target=reply_garbage, daemon=True)
        thread.start()
        response = _client(port).fetch(f"http://a.test:{port}/")
        thread.join(5)
    assert response.error == ERROR_PROTOCOL
    assert response.status is None


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="user_agent"):
        FetchConfig(user_agent=" ")
    with pytest.raises(ValueError, match="timeout"):
        FetchConfig(user_agent=UA, timeout=0)


# --- TLS: SNI and certificate checks use the URL's host, the socket goes to the override ---


def _self_signed(tmp: Path, host: str) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_site(tmp_path: Path, site: Site) -> Iterator[tuple[int, Path]]:
    cert, key = _self_signed(tmp_path, "a.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def remember(sock: object, server_name: str | None, ctx: ssl.SSLContext) -> None:
        site.sni.append(server_name)

    context.sni_callback = remember  # type: ignore[assignment]
    for port in _serve(site, tls=context):
        yield port, cert


def test_https_sends_sni_and_checks_the_certificate_for_the_url_host(
    tls_site: tuple[int, Path], site: Site
) -> None:
    port, cert = tls_site
    client = _client(port, ca_bundle=str(cert))
    response = client.fetch(f"https://a.test:{port}/ok")
    assert (response.status, response.error) == (200, None)
    assert response.body == b"hello, crawler"
    assert site.sni == ["a.test"]
    assert site.requests == [("/ok", f"a.test:{port}")]
    mismatch = client.fetch(f"https://b.test:{port}/ok")
    assert mismatch.error == ERROR_TLS
    assert mismatch.status is None


def test_https_total_deadline_on_a_stalled_body(tls_site: tuple[int, Path]) -> None:
    port, cert = tls_site
    client = _client(port, ca_bundle=str(cert), timeout=0.5)
    began = time.monotonic()
    response = client.fetch(f"https://a.test:{port}/stall-body")
    assert time.monotonic() - began < 0.5 + 0.4
    assert response.error == ERROR_TIMEOUT
    assert response.body == b"z" * 10


def test_https_total_deadline_on_a_trickled_body(tls_site: tuple[int, Path]) -> None:
    port, cert = tls_site
    client = _client(port, ca_bundle=str(cert), timeout=0.4)
    began = time.monotonic()
    response = client.fetch(f"https://a.test:{port}/trickle-body")
    assert time.monotonic() - began < 0.4 + 0.4
    assert response.error == ERROR_TIMEOUT
    assert 0 < len(response.body) < 100


def test_https_without_verification_accepts_any_certificate(tls_site: tuple[int, Path]) -> None:
    port, _ = tls_site
    response = _client(port, verify_tls=False).fetch(f"https://b.test:{port}/ok")
    assert (response.status, response.error) == (200, None)
