-- Fetch spacing: time between the starts of two consecutive fetches of the same host, as
-- percentiles over all hosts of a crawl (nearest rank: the smallest gap with at least p% of
-- the gaps at or below it). The table has no fetch latency column; spacing is the closest
-- measure it holds: it is at least the host's politeness delay plus its response time, so
-- a p50 far above the configured delay means the crawler, not the host, was the bottleneck.
-- Values are INTERVALs. For per-host percentiles add host to both PARTITION BYs of `ranked`
-- and to the final GROUP BY.
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
gap AS (
  SELECT
    crawl_id,
    host,
    fetched_at - LAG(fetched_at) OVER (PARTITION BY crawl_id, host ORDER BY fetched_at)
      AS spacing
  FROM page
  WHERE fetched_at IS NOT NULL
),
ranked AS (
  SELECT
    crawl_id,
    spacing,
    ROW_NUMBER() OVER (PARTITION BY crawl_id ORDER BY spacing) AS gap_rank,
    COUNT(*) OVER (PARTITION BY crawl_id) AS gap_count
  FROM gap
  WHERE spacing IS NOT NULL
)
SELECT
  crawl_id,
  MAX(gap_count) AS gaps,
  MIN(spacing) AS min_spacing,
  MIN(CASE WHEN 100 * gap_rank >= 50 * gap_count THEN spacing END) AS p50_spacing,
  MIN(CASE WHEN 100 * gap_rank >= 90 * gap_count THEN spacing END) AS p90_spacing,
  MIN(CASE WHEN 100 * gap_rank >= 99 * gap_count THEN spacing END) AS p99_spacing,
  MAX(spacing) AS max_spacing
FROM ranked
GROUP BY crawl_id
ORDER BY crawl_id
