"""The worker account's rights in terraform/, offline: the account every Dataflow worker (and
the Flex Template launcher VM) runs as parses hostile pages, so it must not be able to write
the template spec, nor replace or delete what a launch staged. Its write rights on Cloud
Storage are the crawl output and Dataflow's temp files, each in a bucket of its own.

Every IAM resource of terraform/ is read (python-hcl2), whatever its kind, so a grant added
anywhere (a bucket, the project, an account the worker could act as) is seen.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.test_terraform import _parse_all, _value, locals_of, resources

# Roles that only read objects or bucket metadata. On the template spec's bucket the worker
# may hold these and nothing else.
READ_ONLY = frozenset({
    "roles/storage.objectViewer",
    "roles/storage.legacyObjectReader",
    "roles/storage.legacyBucketReader",
    "roles/storage.bucketViewer",
})
# On the staging bucket it may also create objects: the Flex Template launcher VM runs as the
# worker account and stages the job there. objectCreator holds storage.objects.create only,
# and replacing an object needs storage.objects.delete as well, so a staged file stays as the
# launch wrote it.
STAGING_ALLOWED = READ_ONLY | {"roles/storage.objectCreator"}
# Project-level roles that reach every bucket: none of these for the worker.
BASIC_ROLES = frozenset({"roles/owner", "roles/editor", "roles/viewer"})

_BUCKET = re.compile(r"\$\{google_storage_bucket\.([\w-]+)\.name\}")
_ROLE = re.compile(r"roles/[\w.]+")


def _is_worker(member: Any) -> bool:
    text = str(_value(member))
    return text == "${local.worker}" or "google_service_account.worker." in text


def _roles(body: dict[str, Any]) -> list[str]:
    """The roles one IAM resource grants: its literal role, or each of its for_each."""
    role = _value(body["role"])
    if role in ("${each.value}", "${each.key}"):
        roles = _ROLE.findall(str(_value(body["for_each"])))
        assert roles, f"cannot read the roles of for_each {body['for_each']!r}"
        return roles
    return [role]


def _bucket_label(location: str) -> str:
    match = _BUCKET.search(location)
    assert match is not None, f"{location!r} is not in a bucket this module creates"
    return match[1]


def locations(documents: list[dict[str, Any]]) -> dict[str, str]:
    """Bucket resource label of each place the job uses, read from the job itself."""
    (job,) = resources(documents, "google_dataflow_flex_template_job").values()
    local = locals_of(documents)
    out = re.search(r"'out': '([^']+)'", local["job_parameters"])
    assert out is not None, "the job is given no output location"
    return {
        "templates": _bucket_label(_value(local["template_spec"])),
        "staging": _bucket_label(_value(job["staging_location"])),
        "temp": _bucket_label(_value(job["temp_location"])),
        "output": _bucket_label(out[1]),
    }


def worker_grants(documents: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(kind, resource label, target, role) of every grant naming the worker account."""
    kinds = {kind for document in documents for block in document.get("resource", [])
             for kind in block if "_iam_" in kind}
    grants = []
    for kind in sorted(kinds):
        for label, body in resources(documents, kind).items():
            members = body.get("member", body.get("members"))
            if members is None:
                # An authoritative policy document (..._iam_policy): nothing here can say whom
                # it grants what, so none may exist.
                grants.append((kind, label, "?", "an authoritative IAM policy"))
                continue
            members = _value(members)
            if not any(_is_worker(m) for m in (members if isinstance(members, list)
                                                 else [members])):
                continue
            target = next((_value(body[key]) for key in (
                "bucket", "project", "service_account_id", "topic", "subscription", "instance",
                "table", "dataset_id", "repository", "secret_id", "name") if key in body), "?")
            grants.extend((kind, label, str(target), role) for role in _roles(body))
    return grants


def worker_write_violations(documents: list[dict[str, Any]]) -> list[str]:
    """Every grant that would let the worker account write the template spec, replace or
    delete a staged file, or act as another account; empty when its rights are right."""
    where = locations(documents)
    violations = []
    for kind, label, target, role in worker_grants(documents):
        name = f"{kind}.{label} ({role} on {target})"
        if role == "an authoritative IAM policy":
            violations.append(f"{name}: authoritative policies cannot be checked here")
        elif kind.startswith("google_storage_bucket_"):
            bucket = _bucket_label(target)
            if bucket == where["templates"] and role not in READ_ONLY:
                violations.append(f"{name}: the worker must not write the template spec")
            elif bucket == where["staging"] and role not in STAGING_ALLOWED:
                violations.append(f"{name}: the worker must not replace or delete staged files")
        elif kind.startswith(("google_project_", "google_folder_", "google_organization_")):
            if role in BASIC_ROLES or (role.startswith("roles/storage.")
                                       and role not in READ_ONLY) or not role.startswith(
                                           "roles/"):
                violations.append(f"{name}: a project-wide role that writes every bucket")
        elif kind.startswith("google_service_account_"):
            violations.append(f"{name}: the worker must not act as another account")
    return violations


@pytest.fixture(scope="module")
def terraform() -> list[dict[str, Any]]:
    return _parse_all()


def test_the_spec_staging_temp_and_output_are_four_buckets(terraform) -> None:
    where = locations(terraform)
    assert len(set(where.values())) == 4, where
    buckets = resources(terraform, "google_storage_bucket")
    assert set(where.values()) <= set(buckets)


def test_the_worker_cannot_write_the_spec_or_replace_what_a_launch_staged(terraform) -> None:
    assert worker_write_violations(terraform) == []


def test_the_worker_writes_the_output_and_temp_and_reads_staging(terraform) -> None:
    where = locations(terraform)
    on_bucket: dict[str, set[str]] = {}
    for kind, _, target, role in worker_grants(terraform):
        if kind.startswith("google_storage_bucket_"):
            on_bucket.setdefault(_bucket_label(target), set()).add(role)
    assert on_bucket == {
        where["output"]: {"roles/storage.objectAdmin"},
        where["temp"]: {"roles/storage.objectAdmin"},
        where["staging"]: {"roles/storage.objectViewer", "roles/storage.objectCreator",
                           "roles/storage.legacyBucketReader"},
    }


def test_the_launcher_account_writes_the_spec(terraform) -> None:
    where = locations(terraform)
    writes = {
        _bucket_label(_value(body["bucket"]))
        for body in resources(terraform, "google_storage_bucket_iam_member").values()
        if _value(body["member"]) == "${local.launcher}"
        and "roles/storage.objectAdmin" in _roles(body)
    }
    assert writes == {where["templates"], where["staging"]}


# Each grant below, added to terraform/, must be caught: the check above is live.
_ADDED = {
    "objectAdmin on the spec's bucket": """
        resource "google_storage_bucket_iam_member" "added" {
          bucket = google_storage_bucket.templates.name
          role   = "roles/storage.objectAdmin"
          member = local.worker
        }""",
    "objectCreator on the spec's bucket": """
        resource "google_storage_bucket_iam_member" "added" {
          bucket = google_storage_bucket.templates.name
          role   = "roles/storage.objectCreator"
          member = "serviceAccount:${google_service_account.worker.email}"
        }""",
    "legacyBucketWriter on staging": """
        resource "google_storage_bucket_iam_member" "added" {
          bucket = google_storage_bucket.staging.name
          role   = "roles/storage.legacyBucketWriter"
          member = local.worker
        }""",
    "objectUser on staging, in a binding": """
        resource "google_storage_bucket_iam_binding" "added" {
          bucket  = google_storage_bucket.staging.name
          role    = "roles/storage.objectUser"
          members = [local.worker]
        }""",
    "objectAdmin on staging, among for_each roles": """
        resource "google_storage_bucket_iam_member" "added" {
          for_each = toset(["roles/storage.objectViewer", "roles/storage.objectAdmin"])
          bucket   = google_storage_bucket.staging.name
          role     = each.value
          member   = local.worker
        }""",
    "storage.admin on the project": """
        resource "google_project_iam_member" "added" {
          project = var.project_id
          role    = "roles/storage.admin"
          member  = local.worker
        }""",
    "editor on the project": """
        resource "google_project_iam_member" "added" {
          project = var.project_id
          role    = "roles/editor"
          member  = local.worker
        }""",
    "acting as the launcher account": """
        resource "google_service_account_iam_member" "added" {
          service_account_id = google_service_account.launcher.name
          role               = "roles/iam.serviceAccountTokenCreator"
          member             = local.worker
        }""",
    "an authoritative bucket policy": """
        resource "google_storage_bucket_iam_policy" "added" {
          bucket      = google_storage_bucket.templates.name
          policy_data = data.google_iam_policy.anything.policy_data
        }""",
}


@pytest.mark.parametrize("added", sorted(_ADDED))
def test_a_grant_that_lets_the_worker_write_the_spec_or_staging_is_refused(
        terraform, added: str) -> None:
    hcl2 = pytest.importorskip("hcl2")
    documents = [*terraform, hcl2.loads(_ADDED[added])]
    violations = worker_write_violations(documents)
    assert len(violations) >= 1 and all(".added " in v for v in violations), violations


def test_temp_files_expire_and_staged_files_stay_for_the_running_job(terraform) -> None:
    buckets = resources(terraform, "google_storage_bucket")
    where = locations(terraform)
    for place in ("templates", "staging"):
        assert _value(_value(buckets[where[place]]["versioning"])["enabled"]) is True, place
    ages = {place: [_value(_value(rule["condition"]).get("age"))
                    for rule in buckets[where[place]].get("lifecycle_rule", [])]
            for place in ("temp", "staging", "templates")}
    assert "${var.temp_retention_days}" in ages["temp"], "the temp bucket is never cleaned"
    # A streaming job's later workers may read what its launch staged.
    assert [age for age in ages["staging"] + ages["templates"] if age is not None] == []
