"""Benchmarks of the crawler, run by `make bench` (not part of the test suite): end to end
side by side with Scrapy (e2e), pipeline stages (stages) and extraction quality (quality).

They report figures; they assert nothing. `python -m bench --help` lists what runs.
"""
