"""Offline checks of terraform/: formatting, checkov's policies, and that Terraform creates
exactly the cloud resources the code uses (pipeline/io/resources.py), no more and no fewer.

`terraform validate` needs the Google provider, which cannot be downloaded here; docs/deploy.md
says so. These checks need no network and no provider.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.counters import Counter, Maximum
from pipeline.io.bigquery import CLUSTER_FIELDS, PARTITION_FIELD
from pipeline.io.resources import RESOURCES, bigquery_schema_json

ROOT = Path(__file__).resolve().parent.parent
TERRAFORM = ROOT / "terraform"
_REFERENCE = re.compile(r"^\$\{(google_[a-z_]+)\.([A-Za-z0-9_-]+)\.(?:id|name)\}$")


def _value(raw: Any) -> Any:
    """python-hcl2 wraps every attribute value in a one-element list."""
    return raw[0] if isinstance(raw, list) and len(raw) == 1 else raw


def _parse_all() -> list[dict[str, Any]]:
    hcl2 = pytest.importorskip("hcl2", reason="pip install -e '.[test]' (checkov brings hcl2)")
    documents = []
    for path in sorted(TERRAFORM.glob("*.tf")):
        with path.open() as handle:
            documents.append(hcl2.load(handle))
    return documents


@pytest.fixture(scope="module")
def terraform() -> list[dict[str, Any]]:
    return _parse_all()


def resources(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Every `resource "<kind>" "<label>"` block, by label."""
    found: dict[str, dict[str, Any]] = {}
    for document in documents:
        for block in document.get("resource", []):
            for label, body in block.get(kind, {}).items():
                assert label not in found, f"two {kind}.{label} resources"
                found[label] = body
    return found


def locals_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for document in documents:
        for block in document.get("locals", []):
            merged.update({key: _value(value) for key, value in block.items()})
    return merged


def referenced(raw: Any, kind: str, by_label: dict[str, dict[str, Any]], attribute: str) -> str:
    """The literal `attribute` of the resource a `${kind.label.id}` reference points at."""
    match = _REFERENCE.match(_value(raw))
    assert match is not None and match[1] == kind, f"{raw!r} is not a reference to a {kind}"
    return _value(by_label[match[2]][attribute])


def literal(raw: Any) -> str:
    value = _value(raw)
    assert isinstance(value, str) and "${" not in value, (
        f"{value!r} must be a literal name, so it can be checked against the code"
    )
    return value


# --- Formatting and policies ---------------------------------------------------------------


def _terraform_binary() -> str:
    binary = shutil.which("terraform")
    if binary is None:
        pytest.skip("terraform is not installed (https://developer.hashicorp.com/terraform/install)")
    return binary


def test_terraform_files_are_formatted() -> None:
    result = subprocess.run(
        [_terraform_binary(), "fmt", "-check", "-recursive", "-diff", str(TERRAFORM)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, f"run `terraform fmt -recursive terraform`:\n{result.stdout}"


def test_checkov_finds_no_failed_check_and_every_skip_has_a_reason() -> None:
    checkov = Path(sys.executable).parent / "checkov"
    if not checkov.exists():
        pytest.skip("checkov is not installed: pip install -e '.[test]'")
    result = subprocess.run(
        [str(checkov), "--directory", str(TERRAFORM), "--framework", "terraform",
         "--skip-download", "--output", "json"],
        capture_output=True, text=True, timeout=300,
    )
    report = json.loads(result.stdout)
    failed = [
        f"{check['check_id']} {check['resource']} ({check['file_path']}): {check['check_name']}"
        for check in report["results"]["failed_checks"]
    ]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["passed"] >= 30, "checkov scanned suspiciously little"
    for check in report["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        where = f"{check['check_id']} on {check['resource']}"
        assert len(reason) > 20, f"the skip of {where} needs its reason inline"
    assert result.returncode == 0, result.stderr[-2000:]


# --- The resources are the ones the code uses, and the reverse -----------------------------


def test_the_topics_are_the_ones_the_code_publishes_to_and_reads(terraform) -> None:
    topics = resources(terraform, "google_pubsub_topic")
    assert sorted(literal(body["name"]) for body in topics.values()) == sorted(RESOURCES.topics())


def test_each_subscription_reads_the_topic_the_code_expects(terraform) -> None:
    topics = resources(terraform, "google_pubsub_topic")
    subscriptions = {
        literal(body["name"]): referenced(body["topic"], "google_pubsub_topic", topics, "name")
        for body in resources(terraform, "google_pubsub_subscription").values()
    }
    assert subscriptions == RESOURCES.subscriptions()


def test_subscriptions_never_expire(terraform) -> None:
    for label, body in resources(terraform, "google_pubsub_subscription").items():
        assert _value(_value(body["expiration_policy"])["ttl"]) == "", label


def test_bigtable_tables_and_families_are_the_ones_the_code_writes(terraform) -> None:
    tables = {
        literal(body["name"]): tuple(
            literal(family["family"]) for family in body.get("column_family", [])
        )
        for body in resources(terraform, "google_bigtable_table").values()
    }
    assert tables == RESOURCES.column_families()


def test_every_family_has_one_abandoning_gc_policy_keeping_one_version(terraform) -> None:
    tables = resources(terraform, "google_bigtable_table")
    policies: dict[tuple[str, str], dict[str, Any]] = {}
    for body in resources(terraform, "google_bigtable_gc_policy").values():
        key = (referenced(body["table"], "google_bigtable_table", tables, "name"),
               literal(body["column_family"]))
        assert key not in policies, f"two GC policies for {key}"
        policies[key] = body
    expected = {
        (table, family)
        for table, families in RESOURCES.column_families().items() for family in families
    }
    assert set(policies) == expected
    for key, body in policies.items():
        # Destroying the policy must leave the column family and its data alone.
        assert _value(body["deletion_policy"]) == "ABANDON", key
        assert "'max_version': 1" in _value(body["gc_rules"]), key
    overflow = _value(policies[(RESOURCES.frontier_table, "q")]["gc_rules"])
    assert "'mode': 'union'" in overflow and "'max_age'" in overflow
    assert "var.overflow_ttl_days" in overflow
    for key in expected - {(RESOURCES.frontier_table, "q")}:
        assert "max_age" not in _value(policies[key]["gc_rules"]), f"{key} must never expire"


def test_bigtable_instance_autoscales(terraform) -> None:
    (instance,) = resources(terraform, "google_bigtable_instance").values()
    cluster = _value(instance["cluster"])
    scaling = _value(cluster["autoscaling_config"])
    assert set(scaling) >= {"min_nodes", "max_nodes", "cpu_target"}
    assert _value(instance["deletion_protection"]) is True


def test_the_bigquery_table_is_the_parquet_column_list(terraform) -> None:
    (dataset,) = resources(terraform, "google_bigquery_dataset").values()
    (table,) = resources(terraform, "google_bigquery_table").values()
    assert literal(dataset["dataset_id"]) == RESOURCES.bigquery_dataset
    assert literal(table["table_id"]) == RESOURCES.bigquery_table
    schema_file = re.search(r"([\w.-]+\.json)", _value(table["schema"]))
    assert schema_file is not None, "the table's schema must come from a JSON file"
    text = (TERRAFORM / schema_file[1]).read_text()
    assert text == bigquery_schema_json(), (
        "terraform/pages_schema.json is stale: "
        "python -m pipeline.io.resources bigquery-schema > terraform/pages_schema.json"
    )
    columns = tuple((f["name"], f["type"], f["mode"]) for f in json.loads(text))
    assert columns == RESOURCES.bigquery_columns()
    partitioning = _value(table["time_partitioning"])
    assert _value(partitioning["type"]) == "DAY"
    assert _value(partitioning["field"]) == PARTITION_FIELD
    assert tuple(_value(table["clustering"])) == CLUSTER_FIELDS


def test_every_bucket_is_private(terraform) -> None:
    # Output, temp, staging and the template spec (tests/test_worker_rights.py: who writes
    # which).
    buckets = resources(terraform, "google_storage_bucket")
    assert set(buckets) == {"crawl", "temp", "staging", "templates"}
    for label, bucket in buckets.items():
        assert _value(bucket["uniform_bucket_level_access"]) is True, label
        assert _value(bucket["public_access_prevention"]) == "enforced", label


def test_the_job_drains_on_delete_and_runs_as_the_worker(terraform) -> None:
    (job,) = resources(terraform, "google_dataflow_flex_template_job").values()
    assert _value(job["provider"]) == "${google-beta}"
    assert _value(job["on_delete"]) == "drain"
    assert _value(job["enable_streaming_engine"]) is True
    assert _value(job["service_account_email"]) == "${google_service_account.worker.email}"
    assert "local.image" in _value(job["sdk_container_image"])


def test_the_job_is_given_every_resource_name_terraform_creates(terraform) -> None:
    parameters = locals_of(terraform)["job_parameters"]
    for kind, name in (
        ("google_pubsub_subscription", "frontier_fleet"),
        ("google_pubsub_topic", "frontier"),
        ("google_pubsub_topic", "dead_letters"),
        ("google_pubsub_topic", "page_events"),
        ("google_bigtable_table", "pages"),
        ("google_bigtable_table", "crawls"),
        ("google_bigtable_table", "frontier"),
        ("google_bigtable_instance", "crawler"),
        ("google_bigquery_table", "pages"),
    ):
        assert f"{kind}.{name}." in parameters, f"job parameters do not name {kind}.{name}"
    # Template parameters are the launcher's options, named like the resources they default to.
    keys = set(re.findall(r"'(\w+)':", parameters))
    named = {field.name for field in fields(RESOURCES)} - {"bigquery_dataset", "bigquery_table",
                                                           "dead_letter_subscription"}
    assert named <= keys, f"the job is not given {sorted(named - keys)}"
    assert {"out", "bigtable_instance", "bigquery_table"} <= keys


def test_every_variable_says_what_it_is(terraform) -> None:
    variables = {
        name: body
        for document in terraform for block in document.get("variable", [])
        for name, body in block.items()
    }
    assert len(variables) >= 10
    for name, body in variables.items():
        assert len(_value(body.get("description", ""))) > 15, f"variable {name} lacks a description"
        assert "type" in body, f"variable {name} lacks a type"


# --- Monitoring reads counters the crawler really keeps ------------------------------------


def test_the_dashboard_and_alerts_read_counters_the_code_keeps(terraform) -> None:
    counters = locals_of(terraform)["crawler_counters"]
    kept = {str(counter) for counter in Counter}
    # Dataflow splits a Beam distribution into these four scalars.
    kept |= {f"{maximum}_{part}" for maximum in Maximum for part in ("MIN", "MAX", "MEAN", "COUNT")}
    for name in counters:
        assert name in kept, (
            f"monitoring reads counter {name!r}, which pipeline.core.counters does not define"
        )
    text = (TERRAFORM / "monitoring.tf").read_text()
    used = set(re.findall(r'local\.user_counter\["(\w+)"\]', text))
    assert used == set(counters), "every listed counter is charted or alerted on, and only those"
    subscriptions = re.findall(r"subscription_id=\\\"\$\{google_pubsub_subscription\.(\w+)\.name",
                               text)
    assert subscriptions == ["frontier_fleet"]


# --- The control API on Cloud Run ------------------------------------------------------------


def test_the_api_is_given_every_setting_it_reads_naming_the_resources_the_code_uses(
        terraform) -> None:
    from pipeline.options import OPTIONS
    from pipeline.service.cloud import CloudSettings

    env = locals_of(terraform)["api_env"]
    # PORT is Cloud Run's own (reserved); a crawl's defaults are var.crawl_defaults, one
    # CRAWLER_<NAME> each, for exactly the per-crawl options the API takes defaults for.
    defaults = {opt.dest for opt in OPTIONS if opt.per_crawl and opt.serve}
    assert set(env) | {"PORT"} | {f"CRAWLER_{name.upper()}" for name in defaults} == set(
        CloudSettings.ENV.values())
    variables = (ROOT / "terraform" / "variables.tf").read_text()
    block = variables[variables.index('variable "crawl_defaults"'):]
    allowed = re.search(r"contains\(\[([^\]]*)\], name\)", block).group(1)
    assert {name.strip().strip('"') for name in allowed.split(",")} == defaults
    assert set(CloudSettings.REQUIRED) <= {
        field for field, variable in CloudSettings.ENV.items() if variable in env}
    topics = resources(terraform, "google_pubsub_topic")
    tables = resources(terraform, "google_bigtable_table")
    assert referenced(env["CRAWLER_FRONTIER_TOPIC"], "google_pubsub_topic", topics,
                      "name") == RESOURCES.frontier_topic
    for variable, name in (("CRAWLER_PAGES_TABLE", RESOURCES.pages_table),
                           ("CRAWLER_CRAWLS_TABLE", RESOURCES.crawls_table),
                           ("CRAWLER_FRONTIER_TABLE", RESOURCES.frontier_table)):
        assert referenced(env[variable], "google_bigtable_table", tables, "name") == name
    assert env["CRAWLER_BIGTABLE_INSTANCE"] == "${google_bigtable_instance.crawler.name}"
    assert env["CRAWLER_PROJECT"] == "${var.project_id}"


def _service(terraform) -> dict[str, Any]:
    (service,) = resources(terraform, "google_cloud_run_v2_service").values()
    return service


def test_the_api_runs_as_its_own_account_with_the_token_secret_mounted_as_its_file(
        terraform) -> None:
    service = _service(terraform)
    # Created only once its image and a token version exist.
    assert _value(service["count"]) == "${var.deploy_api ? 1 : 0}"
    template = _value(service["template"])
    assert _value(template["service_account"]) == "${google_service_account.api.email}"
    (account,) = [body for label, body in
                  resources(terraform, "google_service_account").items() if label == "api"]
    assert _value(account["account_id"]) == "crawler-api"
    container = _value(template["containers"])
    assert _value(container["image"]) == "${local.api_image}"
    assert "/crawler-api:" in locals_of(terraform)["api_image"]
    (env_block,) = _value(container["dynamic"]).values()
    assert _value(env_block["for_each"]) == "${merge(local.api_crawl_defaults,local.api_env)}"
    volume = _value(template["volumes"])
    secret = _value(volume["secret"])
    assert _value(secret["secret"]) == "${google_secret_manager_secret.api_tokens.secret_id}"
    item = _value(secret["items"])
    mount = _value(container["volume_mounts"])
    assert _value(mount["name"]) == _value(volume["name"])
    mounted_file = f"{locals_of(terraform)['api_secret_dir']}/{_value(item['path'])}"
    token_file = locals_of(terraform)["api_env"]["CRAWLER_TOKEN_FILE"].replace(
        "${local.api_secret_dir}", locals_of(terraform)["api_secret_dir"])
    assert _value(mount["mount_path"]) == "${local.api_secret_dir}"
    assert token_file == mounted_file
    # The probes ask the one route without a token.
    for probe in ("startup_probe", "liveness_probe"):
        assert _value(_value(_value(container[probe])["http_get"])["path"]) == "/healthz"


def test_terraform_holds_no_token_value(terraform) -> None:
    assert resources(terraform, "google_secret_manager_secret_version") == {}
    (secret,) = resources(terraform, "google_secret_manager_secret").values()
    assert _value(secret["secret_id"]) == "crawler-api-tokens"


def _api_grants(terraform) -> set[tuple[str, str, str]]:
    """(resource kind, what it is granted on, role) of every grant to the API's account."""
    api_member = locals_of(terraform)["api"]
    assert api_member == "serviceAccount:${google_service_account.api.email}"
    # Every IAM resource of any kind, so a grant of a kind not foreseen here is seen too.
    kinds = {kind for document in terraform for block in document.get("resource", [])
             for kind in block if "_iam_" in kind}
    grants = set()
    for kind in sorted(kinds):
        for body in resources(terraform, kind).values():
            member = _value(body.get("member", body.get("members")))
            if "google_service_account.api." not in json.dumps(member) and member != (
                    "${local.api}"):
                continue
            target = next((_value(body[key]) for key in (
                "table", "topic", "subscription", "bucket", "secret_id", "instance",
                "dataset_id", "repository", "service_account_id", "name", "project")
                if key in body), "?")
            grants.add((kind, target, _value(body["role"])))
    return grants


def test_the_api_account_holds_only_the_roles_its_requests_need(terraform) -> None:
    assert _api_grants(terraform) == {
        ("google_pubsub_topic_iam_member", "${google_pubsub_topic.frontier.name}",
         "roles/pubsub.publisher"),
        ("google_bigtable_table_iam_member", "${google_bigtable_table.crawls.name}",
         "roles/bigtable.user"),
        ("google_bigtable_table_iam_member", "${google_bigtable_table.pages.name}",
         "roles/bigtable.reader"),
        ("google_storage_bucket_iam_member", "${google_storage_bucket.crawl.name}",
         "roles/storage.objectViewer"),
        ("google_secret_manager_secret_iam_member",
         "${google_secret_manager_secret.api_tokens.id}", "roles/secretmanager.secretAccessor"),
    }
    # The bucket grant reads extracted text only, not raw responses or anything else.
    (text,) = [body for label, body in resources(terraform, "google_storage_bucket_iam_member")
               .items() if label == "api_text"]
    expression = _value(_value(text["condition"])["expression"])
    assert "/objects/crawls/" in expression and ".warc.wet.gz" in expression


def test_nobody_may_call_the_api_unless_named_and_never_everybody(terraform) -> None:
    variables = {name: body for document in terraform for block in document.get("variable", [])
                 for name, body in block.items()}
    invokers = variables["api_invokers"]
    assert _value(invokers["default"]) == []
    (binding,) = resources(terraform, "google_cloud_run_v2_service_iam_member").values()
    assert _value(binding["for_each"]) == (
        "${var.deploy_api ? toset(var.api_invokers) : toset([])}")
    assert _value(binding["role"]) == "roles/run.invoker"
    condition = _value(_value(invokers["validation"])["condition"])
    pattern = re.search(r'regex\("(.+)",\s*m\)', condition)[1].replace("\\\\", "\\")
    for member in ("user:ops@example.com", "group:crawl-ops@example.com",
                   "serviceAccount:ci@p.iam.gserviceaccount.com", "domain:example.com"):
        assert re.fullmatch(pattern, member), member
    for member in ("allUsers", "allAuthenticatedUsers", "user:", "ops@example.com"):
        assert not re.fullmatch(pattern, member), member


# --- State ------------------------------------------------------------------------------------


def test_the_state_backend_example_is_a_gcs_backend_on_a_versioned_bucket() -> None:
    hcl2 = pytest.importorskip("hcl2", reason="pip install -e '.[test]' (checkov brings hcl2)")
    example = TERRAFORM / "backend.tf.example"
    (block,) = hcl2.loads(example.read_text())["terraform"]
    (backend,) = block["backend"]
    gcs = backend["gcs"]
    assert _value(gcs["bucket"]) and _value(gcs["prefix"])
    assert "--versioning" in example.read_text()


def test_the_provider_lock_file_would_be_committed_and_the_providers_not() -> None:
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT,
                              timeout=30).returncode == 0

    assert not ignored("terraform/.terraform.lock.hcl")
    assert ignored("terraform/.terraform/providers/x")
    assert ignored("terraform/terraform.tfstate")
