"""The synthetic web that crawls are tested, demonstrated and benchmarked against, and the
auditor that checks a finished crawl of it (docs/design.md, invariants 1-5)."""

from testweb.audit import AuditReport, audit_crawl
from testweb.server import LoggedRequest, RunningWeb, read_request_log, serve
from testweb.web import Expected, Response, RobotsKind, SyntheticWeb, WebSpec

__all__ = [
    "AuditReport",
    "Expected",
    "LoggedRequest",
    "Response",
    "RobotsKind",
    "RunningWeb",
    "SyntheticWeb",
    "WebSpec",
    "audit_crawl",
    "read_request_log",
    "serve",
]
