"""What only the embedded local run needs: the Pub/Sub and Bigtable emulators, the
DirectRunner speedups, the local runtime that starts, watches and stops a crawl on this
machine (in one process, or in worker processes that each own a share of the politeness keys,
with the frontier routed to them), resume from stored output, and the progress display.

Nothing on Dataflow imports this package: the transforms never do, and the cloud launcher
builds the same graph without it. It may import every other layer except `pipeline.cli`.
"""
