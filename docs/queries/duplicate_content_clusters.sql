-- Duplicate clusters: extracted text (content_hash) shared by several URLs of a crawl.
-- `duplicates` counts the members stored as state 'duplicate' (their text was not stored
-- again); first_url is the member whose text was stored (the one duplicates point at), or,
-- in a table written before duplicates had their own state, the one fetched first.
-- example_urls lists first_url and the next two members by fetch time. Largest clusters
-- first, top 100.
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
member AS (
  SELECT
    crawl_id,
    content_hash,
    url,
    host,
    state,
    ROW_NUMBER() OVER (
      PARTITION BY crawl_id, content_hash
      ORDER BY CASE WHEN state = 'duplicate' THEN 1 ELSE 0 END, fetched_at, url
    ) AS member_rank,
    COUNT(*) OVER (PARTITION BY crawl_id, content_hash) AS member_count
  FROM page
  WHERE content_hash IS NOT NULL
)
SELECT
  crawl_id,
  content_hash,
  MAX(member_count) AS urls,
  COUNT(DISTINCT host) AS hosts,
  COUNTIF(state = 'duplicate') AS duplicates,
  MAX(CASE WHEN member_rank = 1 THEN url END) AS first_url,
  STRING_AGG(CASE WHEN member_rank <= 3 THEN url END, ' ' ORDER BY member_rank) AS example_urls
FROM member
WHERE member_count > 1
GROUP BY crawl_id, content_hash
ORDER BY urls DESC, crawl_id, first_url
LIMIT 100
