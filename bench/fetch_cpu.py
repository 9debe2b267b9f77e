"""Fetch client CPU per fetch: the crawler's FetchClient (requests + urllib3, the client the
scheduler's pool runs) downloading one page body from a loopback server in another process.

This module owns that one measurement, for the scale model (bench.scale): CPU of the calling
process only (time.process_time), the server's CPU is its own process's. Cases: plain HTTP and
HTTPS (a throwaway CA and a P-256 certificate for the host name), a kept-alive connection or a
new one per fetch (the server answers `Connection: close`), the body sent as is or gzip. What
it leaves out: DNS (the name is mapped like --resolve), the thread-pool hand-off, and a real
network's latency (a slow read costs waits, not CPU).

    .venv/bin/python -m bench.fetch_cpu [--body-bytes 55000] [--fetches 200]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "fetch-bench.test"
# (scheme, new connection per fetch, gzip): the first is the planning case of the scale model.
CASES = (("https", True, True), ("https", True, False), ("https", False, True),
         ("http", True, False), ("http", False, False))


@dataclass(frozen=True)
class FetchCpu:
    scheme: str
    new_connection: bool
    gzip: bool
    body_bytes: int  # decoded body the client returns
    wire_bytes: int  # what the server sends as the entity
    ms_per_fetch: float

    @property
    def name(self) -> str:
        connection = "new connection" if self.new_connection else "kept-alive connection"
        encoding = "gzip" if self.gzip else "identity"
        return f"{self.scheme.upper()}, {connection}, {encoding}"


def write_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a leaf certificate for HOST signed by it: (ca.pem, leaf.pem, leaf.key).

    Made with `cryptography` (already installed with Beam and google-auth) so the client
    verifies a chain as it does on the web, with the crawler's own TLS settings."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fetch-bench CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def serve(body_path: Path, cert: Path | None, key: Path | None, close: bool,
          compress: bool) -> None:
    """Serve body_path's bytes as text/html at every path until stdin closes; print the port
    as one JSON line first."""
    import ssl
    import threading

    body = body_path.read_bytes()
    entity = gzip.compress(body, 6) if compress else body

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(entity)))
            if compress:
                self.send_header("Content-Encoding", "gzip")
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(entity)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if cert is not None and key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1], "entity_bytes": len(entity)}),
          flush=True)
    sys.stdin.read()
    server.shutdown()


def measure_case(body_path: Path, certs: tuple[Path, Path, Path], scheme: str,
                 new_connection: bool, compress: bool, fetches: int) -> FetchCpu:
    from pipeline.io.dns import ResolveOverride, Resolver
    from pipeline.io.fetch import FetchClient, FetchConfig

    ca, leaf, key = certs
    command = [sys.executable, "-m", "bench.fetch_cpu", "--serve", str(body_path)]
    if scheme == "https":
        command += ["--cert", str(leaf), "--key", str(key)]
    if new_connection:
        command.append("--close")
    if compress:
        command.append("--gzip")
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"the fetch benchmark's server did not start: {' '.join(command)}")
        started = json.loads(line)
        port = started["port"]
        client = FetchClient(FetchConfig(user_agent="beam-crawler/bench", ca_bundle=str(ca)),
                             Resolver([ResolveOverride(HOST, port, "127.0.0.1")]))
        url = f"{scheme}://{HOST}:{port}/page.html"
        expected = body_path.read_bytes()

        def fetch() -> None:
            response = client.fetch(url)
            if response.error is not None or response.body != expected:
                raise RuntimeError(f"fetch benchmark: {url} answered {response.status} "
                                   f"{response.error} {response.error_detail}")

        for _ in range(5):  # connection pool, TLS context and imports warm
            fetch()
        began = time.process_time()
        for _ in range(fetches):
            fetch()
        spent = time.process_time() - began
        client.close()
        return FetchCpu(scheme, new_connection, compress, len(expected),
                        int(started["entity_bytes"]), spent / fetches * 1000)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)


def page_body(target_bytes: int) -> bytes:
    """The real article whose body is closest to target_bytes (real HTML compresses like the
    web; a synthetic filler would not)."""
    from testweb.quality import load_benchmark, shared_data_dir

    pages = load_benchmark(shared_data_dir())
    return min(pages, key=lambda page: abs(len(page.body) - target_bytes)).body


def measure_fetch_cpu(target_bytes: int, fetches: int) -> list[FetchCpu]:
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as directory:
        folder = Path(directory)
        body = folder / "page.html"
        body.write_bytes(page_body(target_bytes))
        certs = write_certificate(folder)
        return [measure_case(body, certs, scheme, new, compress, fetches)
                for scheme, new, compress in CASES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fetch_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body-bytes", type=int, default=55_000,
                        help="serve the real article closest to this size (default: the "
                             "worker-cost corpus's mean, 55 KB)")
    parser.add_argument("--fetches", type=int, default=200, help="timed fetches per case")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cert", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--close", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gzip", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.cert, args.key, args.close, args.gzip)
        return 0
    for figure in measure_fetch_cpu(args.body_bytes, args.fetches):
        print(json.dumps({"case": figure.name, **asdict(figure)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
