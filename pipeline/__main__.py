"""`python -m pipeline` is the `crawler` command."""

from pipeline.cli.main import main

main()
