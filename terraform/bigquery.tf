# The analytics `pages` table: the Parquet table's columns (pages_schema.json is generated from
# pipeline/io/pages_table.py by `python -m pipeline.io.resources bigquery-schema`).

resource "google_bigquery_dataset" "crawler" {
  #checkov:skip=CKV_GCP_81:Rows describe public web pages; Google-managed encryption at rest applies.
  dataset_id                 = "crawler"
  location                   = var.region
  description                = "Crawl results: one row per URL a crawl accepted."
  delete_contents_on_destroy = false
  labels                     = var.labels

  depends_on = [google_project_service.apis]
}

resource "google_bigquery_table" "pages" {
  #checkov:skip=CKV_GCP_80:Rows describe public web pages; Google-managed encryption at rest applies.
  dataset_id          = google_bigquery_dataset.crawler.dataset_id
  table_id            = "pages"
  description         = "One row per accepted URL of every crawl (rows carry crawl_id)."
  deletion_protection = true
  schema              = file("${path.module}/pages_schema.json")
  labels              = var.labels

  # Rows never fetched have no fetched_at and land in the __NULL__ partition.
  time_partitioning {
    type  = "DAY"
    field = "fetched_at"
  }

  clustering = ["host"]
}
