# Four buckets, one per kind of object, so that each identity's rights are set per bucket and
# no IAM condition on object names is needed (docs/deploy.md, "Buckets and rights"):
#   crawl     - the crawl output under crawls/ (WARC/WET segments, Parquet parts);
#               the workers write it;
#   temp      - Dataflow's temporary files; the workers write them;
#   staging   - what a launch stages for the job (its pipeline); the launcher VM, which runs
#               as the worker account, adds a launch's files, and nothing running as that
#               account may replace or delete one;
#   templates - the Flex Template spec; only the launcher account writes it.
# The workers parse hostile pages: what they can write is never what a job runs.

locals {
  buckets = {
    temp      = "${var.bucket_name}-temp"
    staging   = "${var.bucket_name}-staging"
    templates = "${var.bucket_name}-templates"
  }
}

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

  # Versions replaced or deleted (a sink's temporary files, mostly) go a week later.
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

# Dataflow leaves its temporary files behind; they go after temp_retention_days.
resource "google_storage_bucket" "temp" {
  #checkov:skip=CKV_GCP_62:Object access is recorded by Cloud Audit Logs; a usage-log bucket would be one more unlogged bucket.
  #checkov:skip=CKV_GCP_78:Temporary files only, written and deleted by the job; versions would keep nothing worth keeping.
  name                        = local.buckets.temp
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = var.labels

  # Temp files are written and deleted all day: soft-deleted copies would only be billed
  # (Beam warns about a temp or staging bucket with a soft-delete policy).
  soft_delete_policy {
    retention_duration_seconds = 0
  }

  lifecycle_rule {
    condition {
      age = var.temp_retention_days
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# A launch's staged files (the job's pipeline, the launcher's package list). A streaming job
# runs for weeks and a worker it adds later may read them, so age never deletes them: they
# are a few megabytes per launch. Only replaced versions go.
resource "google_storage_bucket" "staging" {
  #checkov:skip=CKV_GCP_62:Object access is recorded by Cloud Audit Logs; a usage-log bucket would be one more unlogged bucket.
  name                        = local.buckets.staging
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = var.labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 1
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# The Flex Template spec (templates/metadata.json and the image it names). Versions keep the
# previous spec for a rollback.
resource "google_storage_bucket" "templates" {
  #checkov:skip=CKV_GCP_62:Object access is recorded by Cloud Audit Logs; a usage-log bucket would be one more unlogged bucket.
  name                        = local.buckets.templates
  location                    = upper(var.region)
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = var.labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      num_newer_versions = 10
      with_state         = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}
