# A dashboard and alerts from the crawler's own counters (pipeline/core/counters.py, Beam namespace
# "crawler"). Dataflow exports each user counter as the gauge
# dataflow.googleapis.com/job/user_counter, the counter's name in its metric_name label and its
# value the job's running total; a Beam distribution arrives as NAME_MIN, NAME_MAX, NAME_MEAN
# and NAME_COUNT. Queries are PromQL: a running total's growth over a window is delta().

locals {
  # Every crawler counter these queries read; tests/test_terraform.py checks each against the
  # counters the code defines (pipeline.core.counters).
  crawler_counters = [
    "pages_stored",
    "requests",
    "urls_accepted",
    "urls_redriven",
    "rows_written",
    "dead_letters",
    "hosts_parked",
    "overflow_urls_lost",
    "due_lag_ms_MAX",
    "due_lag_ms_MEAN",
  ]

  user_counter = {
    for name in local.crawler_counters :
    name => "dataflow_googleapis_com:job_user_counter{monitored_resource=\"dataflow_job\",job_name=\"${var.job_name}\",metric_name=\"${name}\"}"
  }

  frontier_selector = "monitored_resource=\"pubsub_subscription\",subscription_id=\"${google_pubsub_subscription.frontier_fleet.name}\""
  frontier_backlog  = "sum(pubsub_googleapis_com:subscription_num_undelivered_messages{${local.frontier_selector}})"
  frontier_age      = "max(pubsub_googleapis_com:subscription_oldest_unacked_message_age{${local.frontier_selector}})"

  pages_per_second = "sum(delta(${local.user_counter["pages_stored"]}[5m])) / 300"
  # URLs accepted (or redriven) that have no row yet: the work the fleet still owes.
  in_progress = "sum(${local.user_counter["urls_accepted"]}) + (sum(${local.user_counter["urls_redriven"]}) or vector(0)) - (sum(${local.user_counter["rows_written"]}) or vector(0))"

  charts = [
    { title = "Pages stored per second", query = local.pages_per_second },
    { title = "Requests per second (robots.txt included)", query = "sum(delta(${local.user_counter["requests"]}[5m])) / 300" },
    { title = "Frontier backlog (undelivered batches)", query = local.frontier_backlog },
    { title = "Oldest frontier batch (seconds)", query = local.frontier_age },
    { title = "URLs accepted without a row yet", query = local.in_progress },
    { title = "Dead letters per hour", query = "sum(delta(${local.user_counter["dead_letters"]}[1h]))" },
    { title = "Hosts parked per hour (circuit open)", query = "sum(delta(${local.user_counter["hosts_parked"]}[1h]))" },
    { title = "Politeness lag: ms a due host waited, largest", query = "max(${local.user_counter["due_lag_ms_MAX"]})" },
    { title = "Politeness lag: ms a due host waited, mean", query = "max(${local.user_counter["due_lag_ms_MEAN"]})" },
  ]
}

resource "google_monitoring_dashboard" "crawler" {
  dashboard_json = jsonencode({
    displayName = "Crawler fleet (${var.job_name})"
    mosaicLayout = {
      columns = 12
      tiles = [
        for i, chart in local.charts : {
          xPos   = (i % 2) * 6
          yPos   = floor(i / 2) * 4
          width  = 6
          height = 4
          widget = {
            title = chart.title
            xyChart = {
              dataSets = [{
                plotType        = "LINE"
                timeSeriesQuery = { prometheusQuery = chart.query }
              }]
            }
          }
        }
      ]
    }
  })

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "no_progress" {
  display_name          = "Crawler: no page stored for ${var.no_progress_minutes} minutes"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "URLs wait for rows but no page was stored"
    condition_prometheus_query_language {
      query               = "(sum(delta(${local.user_counter["pages_stored"]}[${var.no_progress_minutes}m])) or vector(0)) < 1 and (${local.in_progress}) > 0"
      duration            = "0s"
      evaluation_interval = "60s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Accepted URLs are waiting but the fleet stored no page. Check the job's logs and `crawler status CRAWL_ID`; every host may be parked or the workers may be failing (docs/deploy.md)."
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "dead_letters" {
  display_name          = "Crawler: dead letters growing"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "More than ${var.dead_letters_per_hour} dead letters in an hour"
    condition_prometheus_query_language {
      query               = "sum(delta(${local.user_counter["dead_letters"]}[1h])) > ${var.dead_letters_per_hour}"
      duration            = "0s"
      evaluation_interval = "300s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Pages the parser fails on are kept on `crawler-dead-letters-redrive`. Fix the parser, roll out the image, then `crawler redrive CRAWL_ID` (docs/deploy.md)."
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "backlog_age" {
  display_name          = "Crawler: frontier backlog older than ${var.backlog_age_minutes} minutes"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "Oldest unacknowledged frontier batch"
    condition_prometheus_query_language {
      query               = "${local.frontier_age} > ${var.backlog_age_minutes * 60}"
      duration            = "300s"
      evaluation_interval = "60s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "The fleet reads the frontier slower than links arrive. Raise max_workers, or check for a stuck stage in the Dataflow job graph."
  }

  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "overflow_lost" {
  display_name          = "Crawler: overflow URLs lost"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "Overflow chunks missing when read back"
    condition_prometheus_query_language {
      query               = "sum(delta(${local.user_counter["overflow_urls_lost"]}[1h])) > 0"
      duration            = "0s"
      evaluation_interval = "300s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "URLs waiting in the Bigtable `frontier` table were gone when their host's queue read them back: a crawl outlived overflow_ttl_days, or a chunk write failed. Raise overflow_ttl_days above the longest crawl."
  }

  depends_on = [google_project_service.apis]
}
