output "worker_service_account" {
  description = "The job runs as this account."
  value       = google_service_account.worker.email
}

output "launcher_service_account" {
  description = "Operators and CI impersonate this account to build, launch, drain and start crawls."
  value       = google_service_account.launcher.email
}

output "image" {
  description = "Where to push the crawler image (templates/Dockerfile) for var.image_tag."
  value       = local.image
}

output "template_spec" {
  description = "Where `gcloud dataflow flex-template build` writes the template spec."
  value       = local.template_spec
}

output "bucket" {
  description = "Bucket of the crawl output (segments and Parquet parts under crawls/)."
  value       = google_storage_bucket.crawl.name
}

output "temp_location" {
  description = "The job's temp_location: Dataflow's temporary files."
  value       = "gs://${google_storage_bucket.temp.name}"
}

output "staging_location" {
  description = "The job's staging_location: what a launch stages."
  value       = "gs://${google_storage_bucket.staging.name}"
}

output "bigtable_instance" {
  description = "Bigtable instance of page rows, crawl records and overflow chunks (`crawler status` reads it)."
  value       = google_bigtable_instance.crawler.name
}

output "bigquery_table" {
  description = "The analytics table, as PROJECT:DATASET.TABLE."
  value       = "${var.project_id}:${google_bigquery_dataset.crawler.dataset_id}.${google_bigquery_table.pages.table_id}"
}

output "frontier_topic" {
  description = "Topic a crawl's seeds are published to."
  value       = google_pubsub_topic.frontier.id
}

output "page_events_topic" {
  description = "Topic of page-crawled events; consumers attach their own subscriptions."
  value       = google_pubsub_topic.page_events.id
}

output "egress_addresses" {
  description = "Addresses the crawler fetches from; publish them on the page the User-Agent links to."
  value       = google_compute_address.egress[*].address
}

output "job_parameters" {
  description = "The parameters the Flex Template job is (or would be) launched with."
  value       = local.job_parameters
}

output "job_id" {
  description = "Id of the running Dataflow job, when var.launch_job is true."
  value       = one(google_dataflow_flex_template_job.crawler[*].job_id)
}

output "api_url" {
  description = "URL of the control API on Cloud Run (docs/api.md), when var.deploy_api is true."
  value       = one(google_cloud_run_v2_service.api[*].uri)
}

output "api_service_account" {
  description = "The control API runs as this account."
  value       = google_service_account.api.email
}

output "api_image" {
  description = "Where to push the control API image (templates/service.Dockerfile) for var.api_image_tag."
  value       = local.api_image
}

output "api_token_secret" {
  description = "Secret Manager secret of the API's bearer tokens, one per line; add a version to set or rotate them."
  value       = google_secret_manager_secret.api_tokens.id
}
