# One bucket: crawl segments and Parquet parts under crawls/, Dataflow's temp/ and staging/,
# and the Flex Template spec under templates/.

resource "google_storage_bucket" "crawl" {
  #checkov:skip=CKV_GCP_62:Object access is recorded by Cloud Audit Logs; a usage-log bucket would be one more unlogged bucket for public web data.
  name                        = var.bucket_name
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = var.labels

  # Segments are written once; versions guard them against an accidental overwrite or delete.
  versioning {
    enabled = true
  }

  # Dataflow leaves its temp and staging files behind.
  lifecycle_rule {
    condition {
      age            = var.temp_retention_days
      matches_prefix = ["temp/", "staging/"]
    }
    action {
      type = "Delete"
    }
  }

  # Versions replaced or deleted (temp files, mostly) go a week later.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 7
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}
