-- Hosts with the most failed pages, with their share of the host's pages and the reasons,
-- most frequent first ("HTTP 404 (12); timeout (3)"). One row per (crawl, host), top 50.
WITH page AS (
  SELECT *
  FROM (
    SELECT
      stored.*,
      ROW_NUMBER() OVER (
        PARTITION BY crawl_id, url_hash ORDER BY fetched_at DESC NULLS LAST
      ) AS copy_rank
    FROM pages AS stored
  ) AS ranked
  WHERE copy_rank = 1
),
host_pages AS (
  SELECT crawl_id, host, COUNT(*) AS page_count
  FROM page
  GROUP BY crawl_id, host
),
failure AS (
  SELECT
    crawl_id,
    host,
    COALESCE(NULLIF(reason, ''), '(no reason)') AS failure_reason,
    COUNT(*) AS failure_count
  FROM page
  WHERE state = 'failed'
  GROUP BY crawl_id, host, failure_reason
)
SELECT
  failure.crawl_id,
  failure.host,
  SUM(failure.failure_count) AS failed_pages,
  MAX(host_pages.page_count) AS pages,
  ROUND(SUM(failure.failure_count) / MAX(host_pages.page_count), 3) AS failed_share,
  STRING_AGG(
    CONCAT(failure.failure_reason, ' (', CAST(failure.failure_count AS STRING), ')'),
    '; '
    ORDER BY failure.failure_count DESC, failure.failure_reason
  ) AS reasons
FROM failure
JOIN host_pages
  ON host_pages.crawl_id = failure.crawl_id AND host_pages.host = failure.host
GROUP BY failure.crawl_id, failure.host
ORDER BY failed_pages DESC, failure.crawl_id, failure.host
LIMIT 50
