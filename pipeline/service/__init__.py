"""The crawl service's control API: operators start, watch, pause, resume and cancel crawls of
the fleet and look pages up, over HTTP with bearer tokens; and the status page that shows them
in a browser (pipeline.service.status, its assets in static/)."""
