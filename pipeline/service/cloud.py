"""The control API in the cloud: the app against real Pub/Sub and Bigtable, configured from the
environment, as Cloud Run runs it (terraform/service.tf, templates/service.Dockerfile).

This module owns the cloud settings of the API and their checks: where the fleet's crawl
records and frontier topic are, where the tokens are, and the defaults recorded into a crawl
that leaves them out. It starts no emulator and no fleet: the fleet is the Dataflow job
(pipeline.main), which reads the crawl records this API writes and ends crawls itself.

Tokens come from a file, one per line, as locally: on Cloud Run the Secret Manager secret is
mounted as that file, so the API needs no Secret Manager client and the secret's value never
passes through an environment variable or Terraform. A new secret version reaches the API
when Cloud Run starts a new instance (a new revision, or `gcloud run services update`).

Environment (CloudSettings.ENV):
  CRAWLER_PROJECT              the project of the topics and the Bigtable instance (required)
  CRAWLER_BIGTABLE_INSTANCE    Bigtable instance of the crawls and pages tables (required)
  CRAWLER_TOKEN_FILE           the token file (required; the mounted secret)
  CRAWLER_FRONTIER_TOPIC       the fleet's frontier topic (name; default CloudResources')
  CRAWLER_PAGES_TABLE, CRAWLER_CRAWLS_TABLE, CRAWLER_FRONTIER_TABLE   table names
  CRAWLER_MIN_DELAY, CRAWLER_USER_AGENT   a crawl's defaults when its request has none
  PORT                         where to listen (Cloud Run sets it; default 8080)

Google's clients honour BIGTABLE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST, which is how the
tests run this very wiring offline.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from pipeline.core.crawl_states import CLOUD_STATE_TTL_S
from pipeline.io.bigtable import BigtableConfig, open_tables
from pipeline.io.fetch import DEFAULT_USER_AGENT
from pipeline.io.resources import RESOURCES, CloudResources
from pipeline.service.app import create_app
from pipeline.service.auth import TokenFileError, load_tokens
from pipeline.service.control import CrawlControl, FleetDefaults, PubSubFrontier

log = logging.getLogger(__name__)


class CloudSettingsError(ValueError):
    """The environment does not say where the fleet is, or says it wrongly; names the variable."""


@dataclass(frozen=True)
class CloudSettings:
    """Where the API finds the fleet's stores and its tokens."""

    project: str
    bigtable_instance: str
    token_file: Path
    frontier_topic: str = RESOURCES.frontier_topic
    pages_table: str = RESOURCES.pages_table
    crawls_table: str = RESOURCES.crawls_table
    frontier_table: str = RESOURCES.frontier_table
    min_delay: float = 1.0
    user_agent: str = DEFAULT_USER_AGENT
    port: int = 8080

    # Field -> environment variable (terraform/service.tf sets exactly these; a test checks).
    ENV = {
        "project": "CRAWLER_PROJECT",
        "bigtable_instance": "CRAWLER_BIGTABLE_INSTANCE",
        "token_file": "CRAWLER_TOKEN_FILE",
        "frontier_topic": "CRAWLER_FRONTIER_TOPIC",
        "pages_table": "CRAWLER_PAGES_TABLE",
        "crawls_table": "CRAWLER_CRAWLS_TABLE",
        "frontier_table": "CRAWLER_FRONTIER_TABLE",
        "min_delay": "CRAWLER_MIN_DELAY",
        "user_agent": "CRAWLER_USER_AGENT",
        "port": "PORT",
    }
    REQUIRED = ("project", "bigtable_instance", "token_file")

    def __post_init__(self) -> None:
        for name in self.REQUIRED:
            if not str(getattr(self, name)).strip():
                raise CloudSettingsError(f"{self.ENV[name]} is empty")
        try:
            # The service's naming rules, checked here so a typo fails at start, not per call.
            CloudResources(frontier_topic=self.frontier_topic, pages_table=self.pages_table,
                           crawls_table=self.crawls_table, frontier_table=self.frontier_table)
        except ValueError as exc:
            raise CloudSettingsError(str(exc)) from None
        if not (math.isfinite(self.min_delay) and self.min_delay > 0):
            raise CloudSettingsError(f"{self.ENV['min_delay']} must be a positive number of "
                                     f"seconds (politeness needs a delay), got {self.min_delay}")
        if not 0 < self.port <= 65535:
            raise CloudSettingsError(f"{self.ENV['port']} {self.port} is not a port")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CloudSettings:
        """The settings from `environ`; raises CloudSettingsError naming every missing
        required variable, or the one that is wrong."""
        missing = [cls.ENV[name] for name in cls.REQUIRED if not environ.get(cls.ENV[name])]
        if missing:
            raise CloudSettingsError(
                f"{', '.join(missing)} must be set: the API needs the fleet's project and "
                "Bigtable instance, and a token file (on Cloud Run, the mounted token secret)")
        values: dict[str, object] = {}
        for name, variable in cls.ENV.items():
            text = environ.get(variable)
            if text is None or text == "":
                continue
            if name == "token_file":
                values[name] = Path(text)
            elif name == "min_delay":
                values[name] = _number(variable, text, float)
            elif name == "port":
                values[name] = _number(variable, text, int)
            else:
                values[name] = text
        return cls(**values)  # type: ignore[arg-type]

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.frontier_topic}"

    def bigtable(self) -> BigtableConfig:
        return BigtableConfig(self.project, self.bigtable_instance, pages_table=self.pages_table,
                              crawls_table=self.crawls_table, frontier_table=self.frontier_table)


def _number(variable: str, text: str, kind: type) -> float | int:
    try:
        return kind(text)
    except ValueError:
        raise CloudSettingsError(f"{variable}={text!r} is not a {kind.__name__}") from None


def create_cloud_app(settings: CloudSettings) -> FastAPI:
    """The API over the fleet's stores. Raises TokenFileError before anything is opened if the
    token file holds no usable token: the API refuses to run without one."""
    tokens = load_tokens(settings.token_file)
    # create=False: the tables are Terraform's; the API's account may not administer them.
    tables = open_tables(settings.bigtable(), create=False)
    frontier = PubSubFrontier(settings.topic_path)
    control = CrawlControl(
        tables, frontier,
        FleetDefaults(min_delay=settings.min_delay, user_agent=settings.user_agent),
        # A pause or cancel answers once the job's schedulers cannot hold the old state any
        # more: their cache time on Dataflow (pipeline.main builds them with it).
        propagation_s=CLOUD_STATE_TTL_S,
    )
    app = create_app(control, tokens)

    def close() -> None:
        frontier.close()
        tables.close()

    app.router.on_shutdown.append(close)
    log.info("control API for project %s, Bigtable instance %s, frontier %s, %d token(s)",
             settings.project, settings.bigtable_instance, settings.topic_path, len(tokens))
    return app


def app_from_env() -> FastAPI:
    """The ASGI app from the process's environment, for `uvicorn --factory
    pipeline.service.cloud:app_from_env`."""
    return create_cloud_app(CloudSettings.from_env(os.environ))


def main(environ: Mapping[str, str] | None = None) -> int:
    """`python -m pipeline.service.cloud`: serve the API on $PORT of every interface, as Cloud
    Run expects. A wrong setting or token file is one line on stderr and exit status 2."""
    import uvicorn

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = CloudSettings.from_env(os.environ if environ is None else environ)
        app = create_cloud_app(settings)
    except (CloudSettingsError, TokenFileError) as exc:
        print(f"crawler API: {exc}", file=sys.stderr)
        return 2
    # Uvicorn's access log names method, path and status, never headers: tokens stay out.
    uvicorn.run(app, host="0.0.0.0", port=settings.port, log_config=None,  # noqa: S104
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
