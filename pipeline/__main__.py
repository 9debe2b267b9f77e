"""`python -m pipeline` is the `crawler` command."""

from pipeline.cli import main

main()
