"""The control API as a FastAPI app: routes, JSON shapes, status codes and bearer auth.

This module owns the HTTP face of pipeline.service.control: which request becomes which
operation, the models the OpenAPI schema documents (every response, errors included), and
how each failure maps to a status code with a message that says what to do. `/healthz` is the
only route without a token.

Errors: 401 (no or wrong token, with WWW-Authenticate), 404 (no such crawl or page), 409 (the
action does not apply to the crawl's state), 422 (a request that breaks the schema, or a seed
or URL that cannot be crawled: the detail names it and says why), 503 (Bigtable or the
frontier did not answer; retry later). Nothing a caller sends can make it answer 5xx: the token
is checked before the body is read (an ASGI gate in front of every route), and a rejected value
JSON cannot carry (NaN, Infinity, bytes that are not UTF-8) is named in the 422, not serialised.

/docs and /redoc are served from the package's own copies of Swagger UI and ReDoc
(pipeline/service/static/vendor/), so they work without internet; the status page
(pipeline.service.status) is mounted on top of any app built here.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at runtime.
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.core.crawl_states import (
    LIMIT_FIELDS,
    CrawlAction,
    CrawlLimits,
    CrawlState,
    TransitionRefused,
)
from pipeline.core.urls import MAX_URL_LENGTH, InvalidURL, normalize_url
from pipeline.io.bigtable import COUNTERS, CrawlNotFound, check_crawl_id
from pipeline.io.crawls import Crawl as CrawlRecord
from pipeline.io.crawls import TransitionRaced, check_cursor
from pipeline.io.lookup import PageNotFound, describe_failure
from pipeline.io.pages_table import PAGES_COLUMNS
from pipeline.io.segments import SegmentReadError
from pipeline.options import OPTIONS, Option
from pipeline.service.auth import TokenSet
from pipeline.service.control import CrawlControl, SeedsNotPublished

log = logging.getLogger(__name__)

REALM = "crawler"
MAX_SEEDS = 10_000
# Bounds that keep every limit inside Bigtable's int64 cells and the crawl meaningful.
MAX_COUNT = 10**12


# --- Models --------------------------------------------------------------------------------


def _crawlable_seed(seed: str) -> str:
    try:
        url = normalize_url(seed)
    except InvalidURL as exc:
        raise ValueError(f"seed {seed!r} is not crawlable: {exc}") from None
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"seed {seed!r} is not crawlable: longer than {MAX_URL_LENGTH} "
                         "characters once normalised")
    return url


Seed = Annotated[str, Field(max_length=MAX_URL_LENGTH), AfterValidator(_crawlable_seed)]
# A crawl's own limits: the per-crawl options (pipeline.options), each a field of POST /crawls
# and of the crawl's JSON, named as CrawlLimits names it.
LIMITS = tuple(opt for opt in OPTIONS if opt.per_crawl)


def _limit_field(opt: Option, *, request: bool) -> tuple[Any, Any]:
    """A crawl limit as a model field: its type, range and words from its option."""
    assert opt.value is not None, opt.dest
    kind: Any = opt.value.kind
    description = opt.description
    if opt.action == "append":  # a repeatable flag: a list of values
        item = (Annotated[kind, Field(**dict(opt.value.bounds)), AfterValidator(opt.check)]
                if request else kind)
        return list[item] | None, Field(None, description=description + (
            " (left out: the service's default)" if request else ""))
    if not request:
        return (kind if opt.api_required else kind | None), Field(description=description)
    constraints = dict(opt.value.bounds)
    if opt.upper is not None:
        constraints["le"] = opt.upper
    # The option's own check runs too: the words a caller gets are the command line's.
    checked = Annotated[kind, Field(**constraints), AfterValidator(opt.check)]
    if opt.api_required:
        return checked, Field(description=description)
    return checked | None, Field(None, description=description + " (left out: the service's "
                                                                  "default)")


CrawlRequest = create_model(
    "CrawlRequest",
    __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
    __doc__="A new crawl: seeds and its own limits; a limit left out gets the service's "
            "default (`crawler serve`'s flag of that name), and no bound without one.",
    seeds=(list[Seed], Field(min_length=1, max_length=MAX_SEEDS,
                             description="http(s) URLs to start from")),
    **{opt.api_name: _limit_field(opt, request=True) for opt in LIMITS},
)


class _CrawlFields(BaseModel):
    """A crawl: its state, limits, times (ISO 8601, UTC) and progress."""

    id: str
    state: CrawlState
    reason: str = Field(description="why the crawl is in its state")
    seeds: list[str]
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    counters: dict[str, int] = Field(
        description="what the crawl's record counts: URLs accepted and in each terminal "
                    "state, bytes fetched, requests, hosts active and parked, and the frontier's "
                    "balance (docs/api.md lists each): " + ", ".join(COUNTERS))
    frontier: int = Field(description="accepted URLs not yet in a terminal state")
    hosts_active: int = Field(description="hosts with work of the crawl now")
    hosts_parked: int = Field(description="hosts whose circuit is open while URLs of the "
                                          "crawl wait on them")
    urls_on_parked_hosts: int = Field(description="the URLs waiting on them")
    pages_per_s: float | None = Field(description="pages fetched per second over the last "
                                                  "minute; null until known")


Crawl = create_model(
    "Crawl", __base__=_CrawlFields,
    __doc__="A crawl: its state, its own limits, times (ISO 8601, UTC) and progress.",
    **{opt.api_name: _limit_field(opt, request=False) for opt in LIMITS},
)


class CrawlPage(BaseModel):
    """One page of crawls, newest first."""

    crawls: list[Crawl]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on "
                                                "the last")


class Error(BaseModel):
    """What went wrong and what to do about it."""

    detail: str


class Health(BaseModel):
    status: str


def _page_model() -> type[BaseModel]:
    """The page row's JSON, one field per column of the pages table (pipeline.io.pages_table),
    plus its text when asked for."""
    import pyarrow as pa

    fields: dict[str, Any] = {}
    for column in PAGES_COLUMNS:
        kind: Any
        if pa.types.is_timestamp(column.arrow_type):
            kind = str
        elif pa.types.is_integer(column.arrow_type):
            kind = int
        else:
            kind = str
        if column.nullable:
            kind = kind | None
        fields[column.name] = (kind, Field(description=column.description))
    fields["text"] = (str | None, Field(None, description="extracted text (with text=true); "
                                                          "null when none was stored"))
    return create_model("Page", **fields)


Page = _page_model()


def _crawl_json(crawl: CrawlRecord, pages_per_s: float | None) -> Crawl:
    return Crawl(
        id=crawl.id, state=crawl.state, reason=crawl.reason, seeds=list(crawl.seeds),
        **{name: getattr(crawl.limits, name) for name in LIMIT_FIELDS},
        created_at=_time(crawl.created_at), started_at=_time(crawl.started_at),
        ended_at=_time(crawl.ended_at), counters=dict(crawl.counters),
        frontier=crawl.frontier, hosts_active=crawl.hosts_active,
        hosts_parked=crawl.counters["hosts_parked_now"],
        urls_on_parked_hosts=crawl.counters["urls_on_parked_hosts"], pages_per_s=pages_per_s,
    )


def _time(epoch_seconds: float | None) -> datetime | None:
    return None if epoch_seconds is None else datetime.fromtimestamp(epoch_seconds, tz=UTC)


# --- Errors --------------------------------------------------------------------------------


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    described = {
        401: "no token, or not a valid one",
        404: "no such crawl or page",
        409: "the action does not apply to the crawl's state",
        503: "Bigtable or the frontier did not answer: retry later",
    }
    return {code: {"model": Error, "description": described[code]} for code in codes}


def _validation_error(
    location: tuple[str, ...], message: str, value: Any
) -> RequestValidationError:
    """A 422 shaped like FastAPI's own, so one schema documents every 422."""
    return RequestValidationError([{
        "loc": location, "msg": message, "type": "value_error", "input": value,
    }])


class _Unavailable(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _json_safe(value: Any) -> Any:
    """A rejected input as JSON can carry it: NaN and the infinities become their names (the
    default 422 handler would fail on them and answer 500), bytes become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _unprocessable(errors: list[dict[str, Any]]) -> JSONResponse:
    safe = [{key: _json_safe(value) if key in ("input", "ctx") else value
             for key, value in error.items()} for error in errors]
    return JSONResponse({"detail": jsonable_encoder(safe)}, status_code=422)


# Paths anyone may load: liveness, the schema, the docs and the status page with their assets.
# None of them carries a crawl's data; everything else needs a token before its body is read.
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                          "/redoc", "/", "/favicon.ico"})
PUBLIC_PREFIXES = ("/static/",)
STATIC_DIR = FilePath(__file__).resolve().parent / "static"
VENDOR = "/static/vendor"


def _refusal(authorization: str | None, tokens: TokenSet) -> HTTPException | None:
    """The 401 for an Authorization header, or None when it carries a valid bearer token."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not authorization or scheme.lower() != "bearer" or not credentials:
        return HTTPException(401, "an Authorization: Bearer TOKEN header is required",
                             headers={"WWW-Authenticate": f'Bearer realm="{REALM}"'})
    if not tokens.accepts(credentials):
        return HTTPException(401, "the token is not valid",
                             headers={"WWW-Authenticate":
                                      f'Bearer realm="{REALM}", error="invalid_token"'})
    return None


class TokenGate:
    """ASGI middleware: a request for any path but the public ones is answered 401 unless it
    carries a valid token, before a route runs and so before its body is read or parsed (a
    route's own dependencies run only after FastAPI has parsed the body, so a malformed body
    with no token would get 422 or 400 instead of 401)."""

    def __init__(self, app: ASGIApp, tokens: TokenSet) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in PUBLIC_PATHS and not path.startswith(
                PUBLIC_PREFIXES):
            header = next((value.decode("latin-1") for name, value in scope["headers"]
                           if name == b"authorization"), None)
            refused = _refusal(header, self.tokens)
            if refused is not None:
                response = JSONResponse({"detail": refused.detail}, status_code=401,
                                        headers=refused.headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- The app -------------------------------------------------------------------------------


def create_app(control: CrawlControl, tokens: TokenSet, *,
               starts_crawls: bool = True) -> FastAPI:
    """The API over `control`, accepting `tokens`. Refuses an empty token set.
    starts_crawls False: no POST /crawls (the status server of one `crawler crawl`, whose
    engine ends its own crawl only)."""
    if len(tokens) == 0:
        raise ValueError("the API refuses to run without a token")
    app = FastAPI(
        title="beam-crawler control API",
        version="1",
        description="Start, watch, pause, resume and cancel crawls of the fleet; look pages "
                    "up. Every route but /healthz needs `Authorization: Bearer TOKEN`.",
        docs_url=None, redoc_url=None,  # served below from the package's own assets
    )
    app.add_middleware(TokenGate, tokens=tokens)
    _answer_errors(app)
    _serve_docs(app)
    routes = _CrawlRoutes(control, tokens)
    # What a router mounted later (pipeline.service.status) needs to serve the same crawls
    # behind the same tokens.
    app.state.extension = ApiExtension(control=control, authorised=routes.authorised,
                                       find=routes.find, unavailable=_Unavailable)
    app.get("/healthz", response_model=Health, tags=["health"],
            summary="Liveness (no token needed)")(healthz)
    app.include_router(routes.router(starts_crawls))
    return app


def healthz() -> Health:
    return Health(status="ok")


def _answer_errors(app: FastAPI) -> None:
    """The app's answers to a backend outage (503), a request failing validation (422, its
    inputs made JSON-safe) and FastAPI's own HTTP errors."""

    @app.exception_handler(_Unavailable)
    def unavailable(request: Request, exc: _Unavailable) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=503)

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _unprocessable(list(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # FastAPI's answer to a body it cannot decode (not UTF-8, say): for the caller
            # that is a body failing validation like any other, so the documented 422.
            return _unprocessable([{"loc": ("body",), "type": "body_invalid", "input": None,
                                    "msg": "the body cannot be read as UTF-8 JSON"}])
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


_BEARER = HTTPBearer(auto_error=False, description="a token from the server's token file")
_CrawlIdPath = Annotated[str, Path(description="the crawl's id")]
_TRANSITIONS = _responses(401, 404, 409, 503)


class _CrawlRoutes:
    """The token-protected routes over one CrawlControl: each maps a request to an operation
    and its failures to the status codes the module docstring lists."""

    def __init__(self, control: CrawlControl, tokens: TokenSet) -> None:
        self.control = control
        self.tokens = tokens

    def router(self, starts_crawls: bool) -> APIRouter:
        api = APIRouter(dependencies=[Depends(self.authorised)], tags=["crawls"])
        if starts_crawls:
            api.post("/crawls", status_code=201, response_model=Crawl,
                     responses=_responses(401, 503), summary="Start a crawl on the fleet",
                     )(self.create)
        api.get("/crawls", response_model=CrawlPage, responses=_responses(401, 503),
                summary="Crawls, newest first")(self.list_crawls)
        api.get("/crawls/{crawl_id}", response_model=Crawl,
                responses=_responses(401, 404, 503),
                summary="A crawl's state and progress")(self.get_crawl)
        api.post("/crawls/{crawl_id}/pause", response_model=Crawl, responses=_TRANSITIONS,
                 summary="Pause: the crawl's URLs wait, none is requested")(self.pause)
        api.post("/crawls/{crawl_id}/resume", response_model=Crawl, responses=_TRANSITIONS,
                 summary="Resume a paused crawl where it was")(self.resume)
        api.post("/crawls/{crawl_id}/cancel", response_model=Crawl, responses=_TRANSITIONS,
                 summary="Cancel: `cancelling` until every waiting URL has its row, then "
                         "`cancelled`")(self.cancel)
        api.get("/pages", response_model=Page, response_model_exclude_unset=True,
                responses=_responses(401, 404, 503),
                summary="A page's latest row, by any spelling of its URL")(self.page)
        return api

    def authorised(
        self, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        # TokenGate has refused a bad token already; this declares the scheme in the schema
        # and keeps a route safe if it is ever served without the gate.
        header = None if credentials is None else (
            f"{credentials.scheme} {credentials.credentials}")
        refused = _refusal(header, self.tokens)
        if refused is not None:
            raise refused

    def backend(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run a Bigtable-backed operation; its client errors become a 503 saying what
        failed (logged once here)."""
        from google.api_core.exceptions import GoogleAPICallError, RetryError

        try:
            return call(*args)
        except (GoogleAPICallError, RetryError) as exc:
            detail = describe_failure(exc, self.control.tables.config)
            log.error("%s", detail)
            raise _Unavailable(detail) from exc

    @staticmethod
    def known(crawl_id: str) -> str:
        try:
            return check_crawl_id(crawl_id)
        except ValueError:
            raise HTTPException(404, f"no crawl {crawl_id!r}") from None

    def find(self, crawl_id: str) -> CrawlRecord:
        """The crawl, or the 404 or 503 that says why not."""
        try:
            return self.backend(self.control.get, self.known(crawl_id))
        except CrawlNotFound as exc:
            raise HTTPException(404, str(exc)) from None

    def create(self, body: CrawlRequest) -> Crawl:
        limits = CrawlLimits(**{name: getattr(body, name) for name in LIMIT_FIELDS})
        try:
            crawl = self.backend(self.control.create, body.seeds, limits)
        except SeedsNotPublished as exc:
            raise _Unavailable(str(exc)) from exc
        return _crawl_json(crawl, None)

    def list_crawls(
        self,
        limit: Annotated[int, Query(ge=1, le=100, description="crawls per page")] = 20,
        cursor: Annotated[str | None, Query(description="next_cursor of the previous page")]
        = None,
    ) -> CrawlPage:
        if cursor is not None:
            try:
                check_cursor(cursor)
            except ValueError as exc:
                raise _validation_error(("query", "cursor"), str(exc), cursor) from None
        crawls, next_cursor = self.backend(self.control.list, limit, cursor)
        return CrawlPage(crawls=[_crawl_json(c, self.control.pages_per_s(c)) for c in crawls],
                         next_cursor=next_cursor)

    def get_crawl(self, crawl_id: _CrawlIdPath) -> Crawl:
        crawl = self.find(crawl_id)
        return _crawl_json(crawl, self.control.pages_per_s(crawl))

    def _act(self, crawl_id: str, action: CrawlAction) -> Crawl:
        try:
            crawl = self.backend(self.control.act, self.known(crawl_id), action)
        except CrawlNotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except (TransitionRefused, TransitionRaced) as exc:
            raise HTTPException(409, str(exc)) from None
        return _crawl_json(crawl, self.control.pages_per_s(crawl))

    def pause(self, crawl_id: _CrawlIdPath) -> Crawl:
        return self._act(crawl_id, CrawlAction.PAUSE)

    def resume(self, crawl_id: _CrawlIdPath) -> Crawl:
        return self._act(crawl_id, CrawlAction.RESUME)

    def cancel(self, crawl_id: _CrawlIdPath) -> Crawl:
        return self._act(crawl_id, CrawlAction.CANCEL)

    def page(
        self,
        url: Annotated[str, Query(min_length=1, max_length=8192, description="the page's URL")],
        crawl_id: Annotated[str | None, Query(description="only this crawl's row (default: "
                                                          "the newest crawl with one)")] = None,
        text: Annotated[bool, Query(description="add the extracted text")] = False,
    ) -> dict[str, Any]:
        self._check_page_query(url, crawl_id)
        try:
            found = self.backend(self.control.page, url, crawl_id, text)
        except PageNotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except (SegmentReadError, OSError) as exc:
            detail = f"the text of {url} is stored but not readable: {exc}"
            log.error("%s", detail)
            raise _Unavailable(detail) from exc
        if found.get("fetched_at") is not None:
            found["fetched_at"] = str(found["fetched_at"])
        return found

    @staticmethod
    def _check_page_query(url: str, crawl_id: str | None) -> None:
        try:
            normalize_url(url)
        except InvalidURL as exc:
            raise _validation_error(("query", "url"), str(exc), url) from None
        if crawl_id is not None:
            try:
                check_crawl_id(crawl_id)
            except ValueError as exc:
                raise _validation_error(("query", "crawl_id"), str(exc), crawl_id) from None


class ApiExtension:
    """Hooks of an app built by create_app for routes added to it later: the control, the
    auth dependency, `find` (a crawl or its 404/503) and the exception that becomes a 503."""

    def __init__(self, *, control: CrawlControl, authorised: Callable[..., None],
                 find: Callable[[str], CrawlRecord], unavailable: type[Exception]) -> None:
        self.control = control
        self.authorised = authorised
        self.find = find
        self.unavailable = unavailable


def _serve_docs(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc from the vendored assets: no CDN, no web font."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return _offline(get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{VENDOR}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{VENDOR}/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        ))

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _offline(get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - ReDoc",
            redoc_js_url=f"{VENDOR}/redoc/redoc.standalone.js",
            redoc_favicon_url="/static/favicon.svg", with_google_fonts=False,
        ))


# The docs pages may load from this server only: ReDoc's footer links a logo on its CDN,
# which this keeps the browser from asking for. Swagger UI starts from an inline script and
# both inject styles; ReDoc searches in a worker it makes from a blob.
DOCS_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
               "'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
               "worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'")


def _offline(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page
