"""Crawl options: validation gives clear errors before anything starts."""

from __future__ import annotations

import pytest

from pipeline.options import CrawlOptions


@pytest.mark.parametrize("crawl_id", ["", "a/b", "with space", "x" * 65, "é"])
def test_a_crawl_id_that_cannot_name_topics_and_row_keys_is_refused(crawl_id):
    with pytest.raises(ValueError, match="--crawl-id"):
        CrawlOptions(seeds=("http://a.test/",), crawl_id=crawl_id)


def test_the_generated_crawl_id_and_usual_ones_are_accepted():
    assert CrawlOptions(seeds=("http://a.test/",)).crawl_id
    for crawl_id in ("c1", "news-2026.12_02", "0start"):
        assert CrawlOptions(seeds=("http://a.test/",), crawl_id=crawl_id).crawl_id == crawl_id


@pytest.mark.parametrize("kwargs", [dict(near_duplicate_bits=17), dict(duplicate_slowdown=0.5)])
def test_duplicate_knobs_out_of_range_are_refused(kwargs):
    with pytest.raises(ValueError):
        CrawlOptions(seeds=("http://a.test/",), **kwargs)


def test_the_options_reach_the_policies():
    opts = CrawlOptions(seeds=("http://a.test/",), near_duplicate_bits=5, duplicate_slowdown=2.5)
    assert opts.duplicate_policy().bits == 5
    assert opts.host_policy().duplicate_slowdown == 2.5


def test_the_retry_base_reaches_the_host_policy():
    assert CrawlOptions(seeds=("http://a.test/",), retry_base=0.5).host_policy().retry_base == 0.5


def test_the_extractor_is_checked_and_the_help_says_what_each_scores():
    import argparse

    from pipeline.options import add_crawl_arguments

    with pytest.raises(ValueError, match="--extractor"):
        CrawlOptions(seeds=("http://a.test/",), extractor="rs-trafilatura")
    parser = argparse.ArgumentParser()
    add_crawl_arguments(parser)
    assert "F1 0.965" in parser.format_help()


def test_allow_network_is_repeatable_reaches_the_fetch_config_and_explains_the_default():
    import argparse

    from pipeline.options import add_crawl_arguments, options_from_args

    parser = argparse.ArgumentParser()
    add_crawl_arguments(parser)
    args = parser.parse_args(["http://a.test/", "--allow-network", "10.20.0.0/16",
                              "--allow-network", "fd00::/8"])
    opts = options_from_args(args)
    assert opts.allow_networks == ("10.20.0.0/16", "fd00::/8")
    assert opts.fetch_config().allow_networks == ("10.20.0.0/16", "fd00::/8")
    assert options_from_args(parser.parse_args(["http://a.test/"])).allow_networks == ()
    help_text = " ".join(parser.format_help().split())
    assert "--allow-network CIDR" in help_text
    assert "By default every connection to a loopback, private," in help_text
    assert "is refused" in help_text and "docs/security.md" in help_text


@pytest.mark.parametrize("spec", ["10.0.0.1/8", "intranet", "10.0.0.0/40"])
def test_a_bad_allow_network_is_refused_before_anything_starts(spec):
    with pytest.raises(ValueError, match="--allow-network"):
        CrawlOptions(seeds=("http://a.test/",), allow_networks=(spec,))
