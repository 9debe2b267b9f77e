# Page rows, crawl records and counters, and host overflow chunks (docs/bigtable.md).

resource "google_bigtable_instance" "crawler" {
  #checkov:skip=CKV_GCP_85:Page rows describe public web pages; Google-managed encryption at rest applies.
  name                = var.bigtable_instance
  display_name        = "Crawler metadata"
  deletion_protection = true
  labels              = var.labels

  cluster {
    cluster_id   = "${var.bigtable_instance}-c1"
    zone         = var.bigtable_zone
    storage_type = "SSD"

    autoscaling_config {
      min_nodes  = var.bigtable_min_nodes
      max_nodes  = var.bigtable_max_nodes
      cpu_target = var.bigtable_cpu_target
    }
  }

  lifecycle {
    precondition {
      condition     = var.bigtable_min_nodes <= var.bigtable_max_nodes
      error_message = "bigtable_min_nodes must not exceed bigtable_max_nodes."
    }
  }

  depends_on = [google_project_service.apis]
}

# One row per accepted URL (family "p", pipeline/io/bigtable.py PAGES_FAMILY).
resource "google_bigtable_table" "pages" {
  name                = "pages"
  instance_name       = google_bigtable_instance.crawler.name
  deletion_protection = "PROTECTED"

  column_family {
    family = "p"
  }
}

# Crawl records, counters and the shared page budget (family "c", CRAWLS_FAMILY).
resource "google_bigtable_table" "crawls" {
  name                = "crawls"
  instance_name       = google_bigtable_instance.crawler.name
  deletion_protection = "PROTECTED"

  column_family {
    family = "c"
  }
}

# URLs a full host queue keeps out of host state, in numbered chunks (family "q",
# FRONTIER_FAMILY; pipeline/io/host_overflow.py).
resource "google_bigtable_table" "frontier" {
  name                = "frontier"
  instance_name       = google_bigtable_instance.crawler.name
  deletion_protection = "PROTECTED"

  column_family {
    family = "q"
  }
}

# Page cells are written at a fixed timestamp and counters by increments: one version is all
# any reader wants. ABANDON: destroying the policy must never touch the data it governed.
resource "google_bigtable_gc_policy" "pages" {
  instance_name   = google_bigtable_instance.crawler.name
  table           = google_bigtable_table.pages.name
  column_family   = "p"
  deletion_policy = "ABANDON"
  gc_rules        = jsonencode({ rules = [{ max_version = 1 }] })
}

resource "google_bigtable_gc_policy" "crawls" {
  instance_name   = google_bigtable_instance.crawler.name
  table           = google_bigtable_table.crawls.name
  column_family   = "c"
  deletion_policy = "ABANDON"
  gc_rules        = jsonencode({ rules = [{ max_version = 1 }] })
}

# A chunk is deleted once read back; the TTL removes chunks of crawls that ended (or were
# cancelled) with URLs still waiting. Chunk cells carry their write time, so age means age.
resource "google_bigtable_gc_policy" "frontier" {
  instance_name   = google_bigtable_instance.crawler.name
  table           = google_bigtable_table.frontier.name
  column_family   = "q"
  deletion_policy = "ABANDON"
  gc_rules = jsonencode({
    mode  = "union"
    rules = [{ max_version = 1 }, { max_age = "${var.overflow_ttl_days * 24}h" }]
  })
}
