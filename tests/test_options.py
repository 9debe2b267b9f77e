"""Crawl options: validation gives clear errors before anything starts."""

from __future__ import annotations

import pytest

from pipeline.options import CrawlOptions, options_from_args


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


# --- One declaration per option ---------------------------------------------------------

def _crawl_parser():
    import argparse

    from pipeline.options import add_crawl_arguments

    parser = argparse.ArgumentParser()
    add_crawl_arguments(parser)
    return parser


# The `crawler crawl` flags and defaults from before options were declared once.
EARLIER_FLAGS = {
    "--out": "crawl-out", "--crawl-id": None, "--max-pages": 10_000,
    "--max-pages-per-host": None, "--max-depth": None, "--min-delay": 1.0,
    "--max-crawl-delay": 30.0, "--resolve": [], "--fetch-timeout": 30.0,
    "--max-body-bytes": 10 * 1024 * 1024, "--max-attempts": 3, "--fetch-concurrency": 128,
    "--bloom-fp-rate": 1e-4, "--max-calendar-pages": 100, "--circuit-failures": 10,
    "--circuit-seconds": 3600.0, "--retry-base": 2.0, "--host-queue-cap": 2000,
    # --extractor was trafilatura; its default is now the one pipeline.core.extractors' rule
    # picks from the measured figures (tests/test_extractors.py), a change made on purpose.
    "--extractor": "trafilatura-fast", "--near-duplicate-bits": 3, "--duplicate-slowdown": 4.0,
    "--bigtable-instance": "local", "--bigquery-table": None, "--resume": False,
    "--redrive": False, "--seeds-file": None,
}


def test_every_earlier_flag_keeps_its_name_and_default():
    parser = _crawl_parser()
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for flag, default in EARLIER_FLAGS.items():
        assert flag in by_flag, flag
        assert by_flag[flag].default == default, flag
    from pipeline.options import options_from_args

    opts = options_from_args(parser.parse_args(["http://a.test/"]))
    assert (opts.user_agent, opts.project, opts.progress) == (
        CrawlOptions(seeds=()).user_agent, "local-crawler", True)
    assert "--no-progress" in by_flag and "--user-agent" in by_flag and "--project" in by_flag


def test_the_dataclass_defaults_are_the_declared_ones():
    import dataclasses

    from pipeline.options import _DEFAULTED, OPTIONS

    # started_at is when the command started, not an option
    fields = {f.name: f for f in dataclasses.fields(CrawlOptions)
              if f.name not in ("seeds", "started_at")}
    assert set(fields) == {opt.dest for opt in OPTIONS}
    for opt in OPTIONS:
        if opt.dest in _DEFAULTED:
            continue
        default = fields[opt.dest].default
        assert default == (tuple(opt.default) if isinstance(opt.default, list) else opt.default), (
            opt.dest)


NEW_KNOBS = ["--lease-grace", "7", "--retry-cap", "90", "--slow-factor", "0",
             "--max-redirect-hops", "2", "--duplicate-window", "6", "--parse-attempts", "5",
             "--budget-block", "4", "--connect-timeout", "3"]


def test_the_knobs_that_had_no_flag_reach_the_policies():
    from pipeline.options import options_from_args

    opts = options_from_args(_crawl_parser().parse_args(["http://a.test/", *NEW_KNOBS]))
    policy = opts.host_policy()
    assert (policy.lease_grace, policy.retry_cap, policy.slow_factor,
            policy.max_redirect_hops) == (7.0, 90.0, 0.0, 2)
    duplicates = opts.duplicate_policy()
    assert duplicates.window == 6 and duplicates.min_pages == 6
    assert opts.fetch_config().connect_timeout == 3.0
    assert (opts.parse_attempts, opts.budget_block) == (5, 4)


def test_beam_spelling_and_the_command_spelling_give_the_same_crawl():
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.options import options_from_args

    dashed = ["--crawl-id", "c1", "--max-pages", "50", "--user-agent", "bot/2", *NEW_KNOBS]
    beam = ["--crawl_id", "c1", "--max_pages", "50", "--crawler_user_agent", "bot/2",
            *["--" + arg[2:].replace("-", "_") if arg.startswith("--") else arg
              for arg in NEW_KNOBS]]
    from_cli = options_from_args(_crawl_parser().parse_args(dashed))
    for flags in (beam, dashed):
        from_beam = CrawlOptions.from_pipeline_options(PipelineOptions(flags))
        assert from_beam == from_cli


def test_beams_own_project_is_the_crawls_project_and_the_options_list_with_beams():
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(["--project", "my-project", "--max_pages", "9"])
    assert CrawlOptions.from_pipeline_options(options).project == "my-project"
    everything = options.get_all_options()  # one parser with every options class: no clash
    assert everything["max_pages"] == 9 and everything["project"] == "my-project"


def test_the_committed_docs_and_readme_tables_are_generated_from_the_options():
    from pipeline.options import ROOT, generated_files

    for path, content in generated_files().items():
        assert (ROOT / path).read_text(encoding="utf-8") == content, (
            f"{path} is stale: run python -m pipeline.options --write")


def test_the_generator_prints_the_metadata(capsys):
    import json

    from pipeline.options import main, template_metadata

    assert main(["--metadata"]) == 0
    assert json.loads(capsys.readouterr().out) == template_metadata()


def test_the_time_budget_is_the_crawls_counted_from_the_command_start():
    import argparse

    from pipeline.options import add_crawl_arguments, options_from_args

    parser = argparse.ArgumentParser()
    add_crawl_arguments(parser)
    assert "--max-duration" in parser.format_help()
    args = parser.parse_args(["http://a.test/", "--max-duration", "90"])
    opts = options_from_args(args)
    assert opts.max_duration == 90.0 and opts.limits().max_duration_s == 90.0
    # The deadline is the crawl's (its record's), not the policy every crawl shares.
    assert opts.host_policy().deadline is None
    with pytest.raises(ValueError, match="--max-duration"):
        CrawlOptions(seeds=("http://a.test/",), max_duration=0)
    with pytest.raises(SystemExit):
        parser.parse_args(["http://a.test/", "--max-duration", "-5"])
    # The `crawler` command counts the budget from its own start, imports included: the
    # crawl's record starts then.
    args.started_at = 1000.0
    assert options_from_args(args).started_at == 1000.0


# --- Each knob declared once: every place it appears is derived from its declaration --------

def _per_crawl():
    from pipeline.options import OPTIONS

    return [opt for opt in OPTIONS if opt.per_crawl]


def test_a_crawls_own_limits_are_the_record_s_fields_and_the_api_s():
    import dataclasses

    from pipeline.core.crawl_states import LIMIT_FIELDS, CrawlLimits
    from pipeline.service.app import Crawl, CrawlRequest

    names = {opt.api_name for opt in _per_crawl()}
    assert set(LIMIT_FIELDS) == {f.name for f in dataclasses.fields(CrawlLimits)} == names
    assert set(CrawlRequest.model_fields) == names | {"seeds"}
    assert names <= set(Crawl.model_fields)
    # What a crawl's record keeps for --resume is every one of them.
    from pipeline.local.resume import MANIFEST_LIMITS

    assert {(opt.dest, opt.api_name) for opt in _per_crawl()} == set(MANIFEST_LIMITS.items())


def test_the_api_s_schema_documents_each_limit_s_range_as_declared():
    from pipeline.service.app import CrawlRequest

    schema = CrawlRequest.model_json_schema()
    keywords = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum",
                "min_length": "minLength", "max_length": "maxLength"}
    for opt in _per_crawl():
        field = schema["properties"][opt.api_name]
        shown = field if "anyOf" not in field else next(
            s for s in field["anyOf"] if s.get("type") != "null")
        shown = shown.get("items", shown)  # a repeatable option: the range of each value
        expected = dict(opt.value.bounds) | ({"le": opt.upper} if opt.upper else {})
        assert {keywords[k]: v for k, v in expected.items()} == {
            keywords[k]: shown[keywords[k]] for k in expected}, opt.dest
        assert (opt.api_name in schema.get("required", [])) == opt.api_required, opt.dest


@pytest.mark.parametrize("dest, bad", [
    ("max_pages", "0"), ("max_pages_per_host", "0"), ("max_depth", "-1"),
    ("max_depth", "10001"), ("min_delay", "0"), ("min_delay", "86401"),
    ("user_agent", "bot/\u00e9"), ("max_duration", "0"),
])
def test_a_bad_limit_is_refused_alike_by_the_command_the_options_and_the_api(dest, bad):
    import pydantic

    from pipeline.options import option
    from pipeline.service.app import CrawlRequest

    opt = option(dest)
    value = bad.encode().decode("unicode_escape")
    with pytest.raises(SystemExit):
        _crawl_parser().parse_args(["http://a.test/", opt.flag, value])
    with pytest.raises(ValueError, match=opt.flag):
        CrawlOptions.from_values({dest: opt.check(value) if opt.value.kind is str
                                  else opt.value.kind(value)}, ("http://a.test/",))
    typed = value if opt.value.kind is str else opt.value.kind(value)
    with pytest.raises(pydantic.ValidationError):
        CrawlRequest(seeds=["http://a.test/"], **{"max_pages": 5, opt.api_name: typed})


@pytest.mark.parametrize("dest, bad", [("scope", "same-site"), ("include", "(docs"),
                                       ("exclude", "[a-")])
def test_a_bad_scope_or_regex_is_refused_by_the_command_the_options_and_the_api(
        dest, bad, capsys):
    import pydantic

    from pipeline.options import option
    from pipeline.service.app import CrawlRequest

    opt = option(dest)
    with pytest.raises(SystemExit):
        _crawl_parser().parse_args(["http://a.test/", opt.flag, bad])
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert opt.flag in line and repr(bad) in line
    value = bad if opt.action is None else (bad,)
    with pytest.raises(ValueError, match=opt.flag):
        CrawlOptions.from_values({dest: value}, ("http://a.test/",))
    with pytest.raises(pydantic.ValidationError):
        CrawlRequest(seeds=["http://a.test/"], max_pages=5,
                     **{opt.api_name: bad if opt.action is None else [bad]})


def test_the_scope_options_reach_the_crawl_s_limits_and_default_to_every_url():
    args = _crawl_parser().parse_args(["http://a.test/", "--scope", "same-domain", "--include",
                                       "/docs/", "--include", "/blog/", "--exclude", "pdf$"])
    limits = options_from_args(args).limits()
    assert (limits.scope, limits.include, limits.exclude) == (
        "same-domain", ("/docs/", "/blog/"), ("pdf$",))
    plain = options_from_args(_crawl_parser().parse_args(["http://a.test/"])).limits()
    assert (plain.scope, plain.include, plain.exclude) == ("all", (), ())
    assert plain.crawl_scope(()).everything


def test_serve_takes_every_serve_option_with_its_default_and_per_crawl_ones_as_defaults():
    import argparse

    from pipeline.cli.serve import add_serve_arguments
    from pipeline.options import OPTIONS, serve_options

    parser = argparse.ArgumentParser(allow_abbrev=False)  # as `crawler serve` parses
    add_serve_arguments(parser)
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for opt in OPTIONS:
        assert (opt.flag in by_flag) == opt.serve, opt.flag
        if opt.serve:
            assert by_flag[opt.flag].default == opt.default, opt.flag
    assert "for a crawl started without max_depth" in by_flag["--max-depth"].help
    args = parser.parse_args(["--token-file", "t", "--max-depth", "2", "--user-agent", "s/1",
                              "--fetch-timeout", "7"])
    options = serve_options(args)
    assert (options.fetch_config().timeout, options.limits().max_depth,
            options.limits().user_agent) == (7.0, 2, "s/1")
    with pytest.raises(SystemExit):
        parser.parse_args(["--token-file", "t", "--max-pages", "5"])  # a crawl always sets it


def test_the_cloud_api_takes_each_crawl_default_from_its_variable():
    from pipeline.service.cloud import CloudSettings, CloudSettingsError

    variables = {opt.dest: f"CRAWLER_{opt.dest.upper()}" for opt in _per_crawl() if opt.serve}
    assert variables.items() <= CloudSettings.ENV.items()
    base = {"CRAWLER_PROJECT": "p", "CRAWLER_BIGTABLE_INSTANCE": "i",
            "CRAWLER_TOKEN_FILE": "/t"}
    settings = CloudSettings.from_env({**base, "CRAWLER_MAX_DEPTH": "4",
                                       "CRAWLER_USER_AGENT": "cloud/1"})
    assert (settings.defaults.max_depth, settings.defaults.user_agent) == (4, "cloud/1")
    with pytest.raises(CloudSettingsError, match="CRAWLER_MAX_DEPTH"):
        CloudSettings.from_env({**base, "CRAWLER_MAX_DEPTH": "-3"})


def test_no_crawl_limit_is_a_template_parameter_and_the_launcher_refuses_each_in_one_line():
    from pipeline.main import LaunchError, job_options
    from pipeline.options import template_metadata

    names = {p["name"] for p in template_metadata()["parameters"]}
    values = {"max_pages": "5", "max_pages_per_host": "5", "max_depth": "2",
              "min_delay": "3", "user_agent": "x/1", "max_duration": "60",
              "scope": "same-host", "include": "/docs/", "exclude": "[.]pdf$",
              "sitemaps": None}  # None: a flag without a value
    for opt in _per_crawl():
        assert opt.beam_name not in names, opt.dest
        with pytest.raises(LaunchError, match=opt.beam_flag):
            job_options([opt.beam_flag, *filter(None, [values[opt.dest]])])


def test_a_seed_out_of_scope_is_said_in_one_line_and_still_crawled_to_its_row(caplog):
    from pipeline.local.runtime import _seeds

    opts = CrawlOptions(seeds=("http://a.test/docs/", "http://a.test/shop/"),
                        include=("/docs/",))
    with caplog.at_level("WARNING"):
        _, seeds, bad = _seeds(opts)
    # Kept among the seeds: its host ends it `filtered`, counted, as any URL out of scope.
    assert seeds == ["http://a.test/docs/", "http://a.test/shop/"] and not bad
    assert [r.getMessage() for r in caplog.records] == [
        "seed http://a.test/shop/ is out of scope (include): it ends `filtered` without a "
        "request"]


def test_the_politeness_key_is_the_job_s_defaults_to_host_and_takes_domain():
    """`crawler crawl`, a job's pipeline options and the template all take `domain`."""
    import re

    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.options import option, template_metadata
    from pipeline.service.app import CrawlRequest

    opt = option("politeness_key")
    assert opt.default == "host" and not opt.per_crawl  # the job's: not a POST /crawls field
    assert "politeness_key" not in CrawlRequest.model_fields
    assert options_from_args(_crawl_parser().parse_args(["http://a.test/"])).politeness_key \
        == "host"
    with pytest.raises(SystemExit):
        _crawl_parser().parse_args(["http://a.test/", "--politeness-key", "origin"])
    args = _crawl_parser().parse_args(["http://a.test/", "--politeness-key", "domain"])
    assert options_from_args(args).politeness_key == "domain"
    job = PipelineOptions(["--politeness_key", "domain"])
    assert CrawlOptions.from_pipeline_options(job).politeness_key == "domain"
    (param,) = [p for p in template_metadata()["parameters"] if p["name"] == "politeness_key"]
    assert [re.fullmatch(param["regexes"][0], key) is not None
            for key in ("host", "domain", "origin")] == [True, True, False]
