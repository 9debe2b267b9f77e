"""The crawl service's control API: operators start, watch, pause, resume and cancel crawls of
the fleet and look pages up, over HTTP with bearer tokens."""
