# Two identities, each granted on the resources it uses, not on the project where avoidable:
#   worker   - the Dataflow job (its Flex Template launcher VM and every worker) runs as it;
#   launcher - operators or CI: build and push the image, build the template, launch, update
#              and drain the job, start crawls and read their status.

resource "google_service_account" "worker" {
  account_id   = "crawler-worker"
  display_name = "Crawler Dataflow workers"
  description  = "Runs the crawler's streaming Dataflow job."

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "launcher" {
  account_id   = "crawler-launcher"
  display_name = "Crawler launcher"
  description  = "Builds the crawler image and template, launches and drains the job, starts crawls."

  depends_on = [google_project_service.apis]
}

locals {
  worker   = "serviceAccount:${google_service_account.worker.email}"
  launcher = "serviceAccount:${google_service_account.launcher.email}"
}

# --- worker ----------------------------------------------------------------------------------

# What a Dataflow worker needs of the project itself (work items, logs, job metrics).
resource "google_project_iam_member" "worker_project" {
  for_each = toset([
    "roles/dataflow.worker",
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
  ])

  project = var.project_id
  role    = each.value
  member  = local.worker
}

resource "google_pubsub_subscription_iam_member" "worker_frontier" {
  # Dataflow's Pub/Sub source reads the subscription's settings (viewer) and pulls (subscriber).
  for_each = toset(["roles/pubsub.subscriber", "roles/pubsub.viewer"])

  subscription = google_pubsub_subscription.frontier_fleet.name
  role         = each.value
  member       = local.worker
}

resource "google_pubsub_topic_iam_member" "worker_publish" {
  # Links and spilled batches loop back; dead letters and page events go out.
  for_each = {
    frontier     = google_pubsub_topic.frontier.name
    dead_letters = google_pubsub_topic.dead_letters.name
    page_events  = google_pubsub_topic.page_events.name
  }

  topic  = each.value
  role   = "roles/pubsub.publisher"
  member = local.worker
}

resource "google_bigtable_instance_iam_member" "worker" {
  instance = google_bigtable_instance.crawler.name
  role     = "roles/bigtable.user"
  member   = local.worker
}

# Buckets (storage.tf): the worker writes the crawl output and Dataflow's temp files, both
# with replace and delete (Beam's file sinks write temporary files and rename them). On the
# staging bucket it reads, and may add files but never replace or delete one: the Flex
# Template launcher VM runs as this account and stages the job's pipeline there, which
# Google documents as needing write access to the staging location. No grant on the
# template spec's bucket. tests/test_worker_rights.py fails on any grant that would let this
# account write the spec or replace a staged file, here or at project level.
resource "google_storage_bucket_iam_member" "worker_output" {
  bucket = google_storage_bucket.crawl.name
  role   = "roles/storage.objectAdmin"
  member = local.worker
}

# The same grant as before the buckets were split: a deployment that had it keeps it, with no
# moment without it for a running job.
moved {
  from = google_storage_bucket_iam_member.worker
  to   = google_storage_bucket_iam_member.worker_output
}

resource "google_storage_bucket_iam_member" "worker_temp" {
  bucket = google_storage_bucket.temp.name
  role   = "roles/storage.objectAdmin"
  member = local.worker
}

resource "google_storage_bucket_iam_member" "worker_staging" {
  # objectCreator creates objects only: overwriting one needs storage.objects.delete too.
  # legacyBucketReader is storage.buckets.get (and objects.list), which Beam's staging calls
  # first (apiclient.stage_file: get_bucket), read only.
  for_each = toset([
    "roles/storage.objectViewer",
    "roles/storage.objectCreator",
    "roles/storage.legacyBucketReader",
  ])

  bucket = google_storage_bucket.staging.name
  role   = each.value
  member = local.worker
}

resource "google_bigquery_dataset_iam_member" "worker" {
  dataset_id = google_bigquery_dataset.crawler.dataset_id
  role       = "roles/bigquery.dataEditor"
  member     = local.worker
}

resource "google_artifact_registry_repository_iam_member" "worker" {
  location   = google_artifact_registry_repository.crawler.location
  repository = google_artifact_registry_repository.crawler.name
  role       = "roles/artifactregistry.reader"
  member     = local.worker
}

# --- launcher --------------------------------------------------------------------------------

resource "google_project_iam_member" "launcher_dataflow" {
  #checkov:skip=CKV_GCP_49:Dataflow roles exist only at project level; the launcher may act as the worker account alone (serviceAccountUser on that account, below).
  project = var.project_id
  role    = "roles/dataflow.developer"
  member  = local.launcher
}

# The job runs as the worker account; whoever launches it must be allowed to act as it.
resource "google_service_account_iam_member" "launcher_acts_as_worker" {
  service_account_id = google_service_account.worker.name
  role               = "roles/iam.serviceAccountUser"
  member             = local.launcher
}

# Builds the template spec; stages a launch made without the template (python -m
# pipeline.main); reads what crawls stored (`crawler page --text`, `crawler query`).
resource "google_storage_bucket_iam_member" "launcher_templates" {
  bucket = google_storage_bucket.templates.name
  role   = "roles/storage.objectAdmin"
  member = local.launcher
}

resource "google_storage_bucket_iam_member" "launcher_staging" {
  # Staging reads the bucket first (storage.buckets.get: legacyBucketReader), then writes.
  for_each = toset(["roles/storage.objectAdmin", "roles/storage.legacyBucketReader"])

  bucket = google_storage_bucket.staging.name
  role   = each.value
  member = local.launcher
}

resource "google_storage_bucket_iam_member" "launcher_output" {
  bucket = google_storage_bucket.crawl.name
  role   = "roles/storage.objectViewer"
  member = local.launcher
}

resource "google_artifact_registry_repository_iam_member" "launcher" {
  location   = google_artifact_registry_repository.crawler.location
  repository = google_artifact_registry_repository.crawler.name
  role       = "roles/artifactregistry.writer"
  member     = local.launcher
}

# Crawl records: `crawler status` reads them and starting a crawl writes one.
resource "google_bigtable_instance_iam_member" "launcher" {
  instance = google_bigtable_instance.crawler.name
  role     = "roles/bigtable.user"
  member   = local.launcher
}

# Starting a crawl puts its seeds on the frontier; `crawler redrive` moves dead letters there.
resource "google_pubsub_topic_iam_member" "launcher_frontier" {
  topic  = google_pubsub_topic.frontier.name
  role   = "roles/pubsub.publisher"
  member = local.launcher
}

resource "google_pubsub_subscription_iam_member" "launcher_redrive" {
  subscription = google_pubsub_subscription.dead_letters_redrive.name
  role         = "roles/pubsub.subscriber"
  member       = local.launcher
}
