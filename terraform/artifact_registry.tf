# The crawler image (templates/Dockerfile): the Flex Template launcher and every worker run it.

resource "google_artifact_registry_repository" "crawler" {
  #checkov:skip=CKV_GCP_84:The image holds open-source code only; Google-managed encryption at rest applies.
  location      = var.region
  repository_id = "crawler"
  format        = "DOCKER"
  description   = "Crawler images for the Dataflow Flex Template and its workers."
  labels        = var.labels

  # A running job pins its image by digest; keep a few older ones for rollback.
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 10
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s"
    }
  }

  depends_on = [google_project_service.apis]
}
