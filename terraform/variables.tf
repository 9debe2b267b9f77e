variable "project_id" {
  description = "Google Cloud project that holds the crawler fleet."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be 6-30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the Dataflow job, the bucket, the BigQuery dataset, the image repository and the worker subnet."
  type        = string
  default     = "europe-west1"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west1."
  }
}

variable "bigtable_zone" {
  description = "Zone of the Bigtable cluster; put it in var.region so workers reach it without cross-region traffic."
  type        = string
  default     = "europe-west1-b"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]-[a-z]$", var.bigtable_zone))
    error_message = "bigtable_zone must be a zone such as europe-west1-b."
  }
}

variable "bigtable_instance" {
  description = "Bigtable instance id; the launcher's Bigtable instance option must name it."
  type        = string
  default     = "crawler"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,25}[a-z0-9]$", var.bigtable_instance))
    error_message = "bigtable_instance must be 6-27 (the cluster id adds 3) lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "bigtable_min_nodes" {
  description = "Fewest Bigtable nodes the autoscaler keeps (one SSD node takes about 10,000 page-row writes/s; docs/cost.md)."
  type        = number
  default     = 1

  validation {
    condition     = var.bigtable_min_nodes >= 1 && floor(var.bigtable_min_nodes) == var.bigtable_min_nodes
    error_message = "bigtable_min_nodes must be a whole number >= 1."
  }
}

variable "bigtable_max_nodes" {
  description = "Most Bigtable nodes the autoscaler may add; bounds the Bigtable bill of a busy crawl."
  type        = number
  default     = 10

  validation {
    condition     = var.bigtable_max_nodes >= 1 && var.bigtable_max_nodes <= 1000 && floor(var.bigtable_max_nodes) == var.bigtable_max_nodes
    error_message = "bigtable_max_nodes must be a whole number from 1 to 1000 (and >= bigtable_min_nodes)."
  }
}

variable "bigtable_cpu_target" {
  description = "Average CPU utilisation (percent) the Bigtable autoscaler aims for; Google recommends 60-70 for latency-sensitive writes."
  type        = number
  default     = 60

  validation {
    condition     = var.bigtable_cpu_target >= 10 && var.bigtable_cpu_target <= 80
    error_message = "bigtable_cpu_target must be between 10 and 80 percent."
  }
}

variable "overflow_ttl_days" {
  description = "Age after which a host's overflow chunk in the Bigtable `frontier` table is garbage-collected. Keep it longer than the longest crawl: a chunk collected before it is read back is counted as overflow_urls_lost."
  type        = number
  default     = 30

  validation {
    condition     = var.overflow_ttl_days >= 7 && floor(var.overflow_ttl_days) == var.overflow_ttl_days
    error_message = "overflow_ttl_days must be a whole number of days, at least 7 (longer than a 5-day crawl)."
  }
}

variable "bucket_name" {
  description = "Cloud Storage bucket for WARC/WET segments and Parquet parts; Dataflow's temp and staging files and the Flex Template spec go to the buckets NAME-temp, NAME-staging and NAME-templates (storage.tf). Globally unique."
  type        = string

  validation {
    # 53, not 63: "-templates" is appended for the template spec's bucket.
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{1,51}[a-z0-9]$", var.bucket_name)) && !startswith(var.bucket_name, "goog")
    error_message = "bucket_name must be 3-53 lowercase letters, digits, hyphens or underscores (NAME-templates must fit 63), not starting with 'goog'."
  }
}

variable "temp_retention_days" {
  description = "Days after which objects of the temp bucket are deleted (Dataflow leaves them behind). The staging bucket keeps a launch's files: a running job's new workers may read them."
  type        = number
  default     = 7

  validation {
    condition     = var.temp_retention_days >= 1 && var.temp_retention_days <= 365
    error_message = "temp_retention_days must be between 1 and 365."
  }
}

variable "image_tag" {
  description = "Tag of the crawler image in Artifact Registry (built from templates/Dockerfile); the job's launcher and workers both run it."
  type        = string
  default     = "latest"

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_tag))
    error_message = "image_tag must be a Docker tag: letters, digits, _, . and -, at most 128 characters."
  }
}

variable "launch_job" {
  description = "Create the Dataflow job. Leave false on the first apply: the image and the Flex Template spec must exist first (docs/deploy.md)."
  type        = bool
  default     = false
}

variable "job_name" {
  description = "Name of the streaming Dataflow job that serves every crawl."
  type        = string
  default     = "crawler-fleet"

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", var.job_name))
    error_message = "job_name must be lowercase letters, digits and hyphens, starting with a letter, at most 63 characters."
  }
}

variable "machine_type" {
  description = "Worker machine type. The job runs one SDK process per worker, which runs Python on one core at a time: two vCPUs, the second for native work and Dataflow's own processes, and n2-standard memory for fetches in flight (docs/architecture.md, \"One worker shape\"; the launcher's WORKER_MACHINE_TYPE)."
  type        = string
  default     = "n2-standard-2"
}

variable "max_workers" {
  description = "Most workers Dataflow autoscaling may start; bounds the compute bill. The autoscaler sees Pub/Sub backlog and CPU, not the URLs waiting in host queues: size it from the crawl's hosts and delay (docs/scale.md, \"Autoscaling limits\")."
  type        = number
  default     = 10

  validation {
    condition     = var.max_workers >= 1 && var.max_workers <= 4000
    error_message = "max_workers must be between 1 and 4000."
  }
}

variable "pipeline_parameters" {
  description = "Further options of the fleet's job passed to the Flex Template, by the names in templates/metadata.json (e.g. { fetch_timeout = \"20\", host_queue_cap = \"4000\" }). Resource names are set by this module; a crawl's own limits (user agent, delay, budgets) are not the job's: see crawl_defaults."
  type        = map(string)
  default     = {}

  validation {
    # A crawl's own limits, and a crawl id: the job serves every crawl, each with its own.
    condition     = alltrue([for name in keys(var.pipeline_parameters) : !contains(["max_pages", "max_pages_per_host", "max_depth", "min_delay", "crawler_user_agent", "max_duration", "scope", "include", "exclude", "sitemaps", "crawl_id", "mode"], name)])
    error_message = "pipeline_parameters are the job's: a crawl's own limits go in crawl_defaults (the API's defaults) or in each POST /crawls, and the job has no crawl_id or mode."
  }
}

variable "crawl_defaults" {
  description = "The limits the control API gives a crawl whose request sets none, by option name: min_delay, user_agent, max_pages_per_host, max_depth, max_duration, scope, sitemaps (e.g. { user_agent = \"mybot/1.0 (+https://example.com/bot)\", min_delay = \"2\" })."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for name in keys(var.crawl_defaults) : contains(["min_delay", "user_agent", "max_pages_per_host", "max_depth", "max_duration", "scope", "sitemaps"], name)])
    error_message = "crawl_defaults takes min_delay, user_agent, max_pages_per_host, max_depth, max_duration, scope and sitemaps."
  }
}

variable "egress_ip_count" {
  description = "Static external addresses the workers' Cloud NAT fetches from; site owners can recognise the crawler by them."
  type        = number
  default     = 2

  validation {
    condition     = var.egress_ip_count >= 1 && var.egress_ip_count <= 50
    error_message = "egress_ip_count must be between 1 and 50."
  }
}

variable "subnet_cidr" {
  description = "Address range of the worker subnet."
  type        = string
  default     = "10.20.0.0/20"

  validation {
    condition     = can(cidrhost(var.subnet_cidr, 0))
    error_message = "subnet_cidr must be an IPv4 CIDR range such as 10.20.0.0/20."
  }
}

variable "alert_notification_channels" {
  description = "Cloud Monitoring notification channel ids (projects/P/notificationChannels/N) the alert policies notify."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.alert_notification_channels : can(regex("^projects/[^/]+/notificationChannels/[0-9]+$", c))])
    error_message = "Each notification channel must be projects/PROJECT/notificationChannels/NUMBER."
  }
}

variable "no_progress_minutes" {
  description = "Alert when no page has been stored for this many minutes while the job runs."
  type        = number
  default     = 15

  validation {
    condition     = var.no_progress_minutes >= 5 && var.no_progress_minutes <= 1440
    error_message = "no_progress_minutes must be between 5 and 1440."
  }
}

variable "dead_letters_per_hour" {
  description = "Alert when more pages than this are dead-lettered in an hour (a parser bug, usually)."
  type        = number
  default     = 100

  validation {
    condition     = var.dead_letters_per_hour >= 0
    error_message = "dead_letters_per_hour must be >= 0."
  }
}

variable "backlog_age_minutes" {
  description = "Alert when the oldest unacknowledged frontier message is older than this (the fleet is not keeping up)."
  type        = number
  default     = 30

  validation {
    condition     = var.backlog_age_minutes >= 1
    error_message = "backlog_age_minutes must be >= 1."
  }
}

variable "labels" {
  description = "Labels put on every resource that takes them."
  type        = map(string)
  default     = { app = "beam-crawler" }
}

variable "deploy_api" {
  description = "Create the control API's Cloud Run service. Leave false until its image is pushed and the token secret has a version (docs/deploy.md)."
  type        = bool
  default     = false
}

variable "api_image_tag" {
  description = "Tag of the control API image (crawler-api, built from templates/service.Dockerfile) in Artifact Registry."
  type        = string
  default     = "latest"

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.api_image_tag))
    error_message = "api_image_tag must be a Docker tag: letters, digits, _, . and -, at most 128 characters."
  }
}

variable "api_ingress" {
  description = "Where the control API accepts requests from: INGRESS_TRAFFIC_ALL (the internet, still behind IAM and tokens), INGRESS_TRAFFIC_INTERNAL_ONLY (the project's VPC) or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.api_ingress)
    error_message = "api_ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "api_min_instances" {
  description = "Control API instances kept warm; 0 lets it scale to zero (the first request then waits for a start, a few seconds)."
  type        = number
  default     = 0

  validation {
    condition     = var.api_min_instances >= 0 && floor(var.api_min_instances) == var.api_min_instances
    error_message = "api_min_instances must be a whole number >= 0."
  }
}

variable "api_max_instances" {
  description = "Most control API instances; bounds its bill and the load a burst of calls puts on the crawls table."
  type        = number
  default     = 3

  validation {
    condition     = var.api_max_instances >= 1 && var.api_max_instances <= 100 && floor(var.api_max_instances) == var.api_max_instances
    error_message = "api_max_instances must be a whole number from 1 to 100 (and >= api_min_instances)."
  }
}

variable "api_invokers" {
  description = "Principals Cloud Run lets call the control API (user:, group:, serviceAccount:, domain:), each then needing a bearer token too. Empty: nobody. allUsers would leave the tokens as the only gate, and is refused."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.api_invokers : can(regex("^(user|group|serviceAccount|domain):[^\\s]+$", m))])
    error_message = "Each invoker must be user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN (allUsers and allAuthenticatedUsers are refused)."
  }
}
