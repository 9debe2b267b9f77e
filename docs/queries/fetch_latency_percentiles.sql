-- Fetch latency: milliseconds from a request's start until its body was read, as
-- percentiles per crawl and host (nearest rank: the smallest latency with at least p% of
-- the host's fetches at or below it), slowest hosts first. Only rows that got an HTTP answer
-- have a latency.
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
ranked AS (
  SELECT
    crawl_id,
    host,
    elapsed_ms,
    ROW_NUMBER() OVER (PARTITION BY crawl_id, host ORDER BY elapsed_ms) AS latency_rank,
    COUNT(*) OVER (PARTITION BY crawl_id, host) AS fetches
  FROM page
  WHERE elapsed_ms IS NOT NULL
)
SELECT
  crawl_id,
  host,
  MAX(fetches) AS fetches,
  MIN(CASE WHEN 100 * latency_rank >= 50 * fetches THEN elapsed_ms END) AS p50_ms,
  MIN(CASE WHEN 100 * latency_rank >= 90 * fetches THEN elapsed_ms END) AS p90_ms,
  MIN(CASE WHEN 100 * latency_rank >= 99 * fetches THEN elapsed_ms END) AS p99_ms,
  MAX(elapsed_ms) AS max_ms
FROM ranked
GROUP BY crawl_id, host
ORDER BY p90_ms DESC, crawl_id, host
