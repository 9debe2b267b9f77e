# The crawler fleet on Google Cloud: one streaming Dataflow job that serves every crawl, the
# control API on Cloud Run that starts and steers crawls, and the stores, queues and identities
# they need. Resource names are the ones the code uses
# (pipeline/io/resources.py); tests/test_terraform.py checks that both agree.

locals {
  services = [
    "artifactregistry.googleapis.com",
    "bigquery.googleapis.com",
    "bigtable.googleapis.com",
    "bigtableadmin.googleapis.com",
    "compute.googleapis.com",
    "dataflow.googleapis.com",
    "iam.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ]
}

resource "google_project_service" "apis" {
  for_each = toset(local.services)

  service = each.value
  # Other workloads of the project may use these APIs too: never switch them off on destroy.
  disable_on_destroy = false
}
