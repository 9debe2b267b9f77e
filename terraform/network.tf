# Workers without public addresses, fetching the web through Cloud NAT from a few static
# addresses: site owners can recognise the crawler by them, and nothing reaches the workers.

resource "google_compute_network" "crawler" {
  name                    = "crawler"
  auto_create_subnetworks = false

  depends_on = [google_project_service.apis]
}

resource "google_compute_subnetwork" "workers" {
  name                     = "crawler-workers"
  network                  = google_compute_network.crawler.id
  region                   = var.region
  ip_cidr_range            = var.subnet_cidr
  private_ip_google_access = true # Pub/Sub, Bigtable, GCS and BigQuery without public addresses

  log_config {
    aggregation_interval = "INTERVAL_10_MIN"
    flow_sampling        = 0.1
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

# Dataflow workers talk to each other on these ports (streaming and shuffle).
resource "google_compute_firewall" "dataflow_workers" {
  name      = "crawler-dataflow-workers"
  network   = google_compute_network.crawler.id
  direction = "INGRESS"

  source_tags = ["dataflow"]
  target_tags = ["dataflow"]

  allow {
    protocol = "tcp"
    ports    = ["12345-12346"]
  }
}

resource "google_compute_router" "crawler" {
  name    = "crawler"
  network = google_compute_network.crawler.id
  region  = var.region
}

resource "google_compute_address" "egress" {
  count = var.egress_ip_count

  name   = "crawler-egress-${count.index}"
  region = var.region
}

resource "google_compute_router_nat" "crawler" {
  name   = "crawler"
  router = google_compute_router.crawler.name
  region = var.region

  nat_ip_allocate_option             = "MANUAL_ONLY"
  nat_ips                            = google_compute_address.egress[*].self_link
  source_subnetwork_ip_ranges_to_nat = "LIST_OF_SUBNETWORKS"

  subnetwork {
    name                    = google_compute_subnetwork.workers.id
    source_ip_ranges_to_nat = ["ALL_IP_RANGES"]
  }

  # A worker keeps connections to thousands of hosts at once. Dynamic port allocation needs
  # endpoint-independent mapping off.
  enable_dynamic_port_allocation      = true
  enable_endpoint_independent_mapping = false
  min_ports_per_vm                    = 4096
  max_ports_per_vm                    = 65536

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}
