# The frontier loop, dead letters kept for redrive, and page-crawled events for consumers.

resource "google_pubsub_topic" "frontier" {
  #checkov:skip=CKV_GCP_83:Frontier batches hold public URLs only; Google-managed encryption at rest applies.
  name   = "crawler-frontier"
  labels = var.labels

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "dead_letters" {
  #checkov:skip=CKV_GCP_83:Dead letters hold public URLs and record pointers only; Google-managed encryption at rest applies.
  name   = "crawler-dead-letters"
  labels = var.labels
  # A letter outlives its subscription's 7 days here, so a late fix can still seek back to it.
  message_retention_duration = "2678400s"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "page_events" {
  #checkov:skip=CKV_GCP_83:Events carry public URLs and record pointers, never content; Google-managed encryption at rest applies.
  name   = "crawler-page-events"
  labels = var.labels

  depends_on = [google_project_service.apis]
}

# The fleet's one frontier subscription: every worker pulls from it.
resource "google_pubsub_subscription" "frontier_fleet" {
  name   = "crawler-frontier-fleet"
  topic  = google_pubsub_topic.frontier.id
  labels = var.labels

  # Dataflow extends deadlines itself and acknowledges once a batch is durably in the pipeline.
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = "" # never expires, however long the fleet is stopped
  }
}

# Keeps dead letters until `crawler redrive` moves them back onto the frontier.
resource "google_pubsub_subscription" "dead_letters_redrive" {
  name   = "crawler-dead-letters-redrive"
  topic  = google_pubsub_topic.dead_letters.id
  labels = var.labels

  ack_deadline_seconds       = 600
  message_retention_duration = "604800s"
  retain_acked_messages      = false

  expiration_policy {
    ttl = ""
  }
}
