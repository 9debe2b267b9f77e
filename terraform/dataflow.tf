# The fleet: one streaming Dataflow job from the Flex Template (templates/), serving every
# crawl the control API (service.tf) starts. Create it only once the image is pushed and the template spec is built
# (var.launch_job; docs/deploy.md).

locals {
  image         = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.crawler.repository_id}/crawler:${var.image_tag}"
  template_spec = "gs://${google_storage_bucket.templates.name}/crawler.json"

  # Template parameters by the launcher's option names (templates/metadata.json). Resource
  # names come from the resources above, so the job reads and writes exactly what this module
  # creates; var.pipeline_parameters adds the crawl knobs and cannot override these.
  job_parameters = merge(var.pipeline_parameters, {
    out                   = "gs://${google_storage_bucket.crawl.name}/crawls"
    bigtable_instance     = google_bigtable_instance.crawler.name
    pages_table           = google_bigtable_table.pages.name
    crawls_table          = google_bigtable_table.crawls.name
    frontier_table        = google_bigtable_table.frontier.name
    frontier_subscription = google_pubsub_subscription.frontier_fleet.name
    frontier_topic        = google_pubsub_topic.frontier.name
    dead_letter_topic     = google_pubsub_topic.dead_letters.name
    events_topic          = google_pubsub_topic.page_events.name
    bigquery_table        = "${var.project_id}:${google_bigquery_dataset.crawler.dataset_id}.${google_bigquery_table.pages.table_id}"
  })
}

resource "google_dataflow_flex_template_job" "crawler" {
  provider = google-beta
  count    = var.launch_job ? 1 : 0

  name                    = var.job_name
  region                  = var.region
  container_spec_gcs_path = local.template_spec
  parameters              = local.job_parameters
  labels                  = var.labels

  # Destroying or replacing the job drains it: it stops reading the frontier and finishes what
  # it has buffered; cancel would discard that.
  on_delete = "drain"

  enable_streaming_engine = true
  sdk_container_image     = local.image
  service_account_email   = google_service_account.worker.email
  subnetwork              = google_compute_subnetwork.workers.self_link
  ip_configuration        = "WORKER_IP_PRIVATE"
  temp_location           = "gs://${google_storage_bucket.temp.name}"
  staging_location        = "gs://${google_storage_bucket.staging.name}"
  machine_type            = var.machine_type
  max_workers             = var.max_workers

  depends_on = [
    google_project_iam_member.worker_project,
    google_pubsub_subscription_iam_member.worker_frontier,
    google_pubsub_topic_iam_member.worker_publish,
    google_bigtable_instance_iam_member.worker,
    google_storage_bucket_iam_member.worker_output,
    google_storage_bucket_iam_member.worker_temp,
    google_storage_bucket_iam_member.worker_staging,
    google_bigquery_dataset_iam_member.worker,
    google_artifact_registry_repository_iam_member.worker,
    google_bigtable_gc_policy.pages,
    google_bigtable_gc_policy.crawls,
    google_bigtable_gc_policy.frontier,
    google_compute_router_nat.crawler,
  ]
}
