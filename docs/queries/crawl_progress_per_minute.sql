-- Crawl progress: pages whose (last) fetch started in each minute, and the running totals.
-- `pages` counts every state that involved a request (fetched, redirected, failed with an
-- answer, ...); `fetched` only pages stored as fetched. Minutes are UTC, labelled
-- 'YYYY-MM-DD HH:MM' (in DuckDB: SET TimeZone = 'UTC' first); minutes without fetches have
-- no row.
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
per_minute AS (
  SELECT
    crawl_id,
    SUBSTR(CAST(fetched_at AS STRING), 1, 16) AS minute_utc,
    COUNT(*) AS page_count,
    COUNTIF(state = 'fetched') AS fetched_count
  FROM page
  WHERE fetched_at IS NOT NULL
  GROUP BY crawl_id, minute_utc
)
SELECT
  crawl_id,
  minute_utc,
  page_count AS pages,
  fetched_count AS fetched,
  SUM(page_count) OVER (
    PARTITION BY crawl_id ORDER BY minute_utc ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
  ) AS pages_total,
  SUM(fetched_count) OVER (
    PARTITION BY crawl_id ORDER BY minute_utc ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
  ) AS fetched_total
FROM per_minute
ORDER BY crawl_id, minute_utc
