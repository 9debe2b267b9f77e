-- Pages per host and terminal state: one row per (crawl, host, state).
-- A page that was stored twice (a replayed row) counts once: the copy with the latest fetch.
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
)
SELECT
  crawl_id,
  host,
  state,
  COUNT(*) AS pages
FROM page
GROUP BY crawl_id, host, state
ORDER BY crawl_id, host, state
