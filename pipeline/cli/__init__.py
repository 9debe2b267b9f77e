"""The `crawler` command: one module per command, each a thin layer of argument parsing and
output over the layers below (`pipeline.local` for the local run, `pipeline.io` for lookups).

This is the only part of `pipeline` that may import the synthetic web (`testweb`), for
`crawler testweb` and `crawler demo`.
"""
