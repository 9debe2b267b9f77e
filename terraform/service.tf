# The control API (pipeline/service) on Cloud Run, in front of the fleet job: it writes crawl
# records to Bigtable and seeds to the frontier topic, and the job reads both. Its own account
# holds only what the API's requests need; the bearer tokens live in one Secret Manager secret
# whose versions the operator adds (docs/deploy.md), mounted as the API's token file.

locals {
  api_image = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.crawler.repository_id}/crawler-api:${var.api_image_tag}"
  # Where the token secret is mounted; CRAWLER_TOKEN_FILE names the file in it.
  api_secret_dir = "/secrets"

  # The API's environment (pipeline/service/cloud.py, CloudSettings.ENV): resource names from
  # the resources this module creates, so the API steers exactly the fleet the job is.
  api_env = {
    CRAWLER_PROJECT           = var.project_id
    CRAWLER_BIGTABLE_INSTANCE = google_bigtable_instance.crawler.name
    CRAWLER_FRONTIER_TOPIC    = google_pubsub_topic.frontier.name
    CRAWLER_PAGES_TABLE       = google_bigtable_table.pages.name
    CRAWLER_CRAWLS_TABLE      = google_bigtable_table.crawls.name
    CRAWLER_FRONTIER_TABLE    = google_bigtable_table.frontier.name
    CRAWLER_TOKEN_FILE        = "${local.api_secret_dir}/tokens"
  }
  # The limits a crawl whose request sets none gets (CRAWLER_ and the option's name).
  api_crawl_defaults = {
    for name, value in var.crawl_defaults : "CRAWLER_${upper(name)}" => value
  }

  api = "serviceAccount:${google_service_account.api.email}"
}

resource "google_service_account" "api" {
  account_id   = "crawler-api"
  display_name = "Crawler control API"
  description  = "Runs the control API on Cloud Run: crawl records, seeds on the frontier, page lookups."

  depends_on = [google_project_service.apis]
}

# --- The token secret: Terraform creates it, never its value -------------------------------

resource "google_secret_manager_secret" "api_tokens" {
  # Google-managed encryption: a customer-managed key would add a KMS key ring this module
  # otherwise does not need.
  secret_id = "crawler-api-tokens"
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_iam_member" "api_tokens" {
  secret_id = google_secret_manager_secret.api_tokens.id
  role      = "roles/secretmanager.secretAccessor"
  member    = local.api
}

# --- What the API's requests touch, each granted where it lives ------------------------------

# POST /crawls puts the seeds on the frontier; nothing else is published.
resource "google_pubsub_topic_iam_member" "api_frontier" {
  topic  = google_pubsub_topic.frontier.name
  role   = "roles/pubsub.publisher"
  member = local.api
}

# Table-level grants, not instance-level: the API writes crawl records (create, pause, resume,
# cancel are check-and-mutate writes on the `crawls` table) and reads page rows (GET /pages),
# but must neither write page rows nor touch the host overflow chunks in `frontier`, which an
# instance-level role would allow.
resource "google_bigtable_table_iam_member" "api_crawls" {
  instance = google_bigtable_instance.crawler.name
  table    = google_bigtable_table.crawls.name
  role     = "roles/bigtable.user"
  member   = local.api
}

resource "google_bigtable_table_iam_member" "api_pages" {
  instance = google_bigtable_instance.crawler.name
  table    = google_bigtable_table.pages.name
  role     = "roles/bigtable.reader"
  member   = local.api
}

# GET /pages?text=true reads a page's text through its row's WET pointer: WET segments only,
# not the raw WARC responses, the Parquet parts or Dataflow's files.
resource "google_storage_bucket_iam_member" "api_text" {
  bucket = google_storage_bucket.crawl.name
  role   = "roles/storage.objectViewer"
  member = local.api

  condition {
    title       = "wet-segments-only"
    description = "Extracted-text segments under crawls/ (OUT/CRAWL_ID/wet/*.warc.wet.gz)."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.crawl.name}/objects/crawls/\") && resource.name.endsWith(\".warc.wet.gz\")"
  }
}

# --- The service -----------------------------------------------------------------------------

resource "google_cloud_run_v2_service" "api" {
  # Created once its image is pushed and the token secret has a version (var.deploy_api).
  count = var.deploy_api ? 1 : 0

  name     = "crawler-api"
  location = var.region
  ingress  = var.api_ingress
  labels   = var.labels

  template {
    service_account = google_service_account.api.email

    scaling {
      min_instance_count = var.api_min_instances
      max_instance_count = var.api_max_instances
    }

    volumes {
      name = "tokens"
      secret {
        secret = google_secret_manager_secret.api_tokens.secret_id
        items {
          # The API reads its token file when an instance starts: a new version reaches it with
          # the next revision (docs/deploy.md, rotating tokens).
          version = "latest"
          path    = "tokens"
        }
      }
    }

    containers {
      image = local.api_image

      ports {
        container_port = 8080
      }

      dynamic "env" {
        for_each = merge(local.api_crawl_defaults, local.api_env)
        content {
          name  = env.key
          value = env.value
        }
      }

      volume_mounts {
        name       = "tokens"
        mount_path = local.api_secret_dir
      }

      resources {
        limits = {
          cpu    = "1"
          memory = "1Gi"
        }
      }

      startup_probe {
        http_get {
          path = "/healthz"
        }
      }

      liveness_probe {
        http_get {
          path = "/healthz"
        }
      }
    }
  }

  depends_on = [
    google_secret_manager_secret_iam_member.api_tokens,
    google_pubsub_topic_iam_member.api_frontier,
    google_bigtable_table_iam_member.api_crawls,
    google_bigtable_table_iam_member.api_pages,
  ]
}

# Who may call the service at all (Cloud Run checks their Google identity; the API then checks
# its own bearer token). Nobody by default.
resource "google_cloud_run_v2_service_iam_member" "api_invokers" {
  for_each = var.deploy_api ? toset(var.api_invokers) : toset([])

  name     = google_cloud_run_v2_service.api[0].name
  location = google_cloud_run_v2_service.api[0].location
  role     = "roles/run.invoker"
  member   = each.value
}
