-- duplicate_ids: which candidate ids really occur more than once (exact).
-- The pools pass flags candidates with a bitmap; this check runs only when it flagged some. The
-- candidates come as a parquet file (one BIGINT column `id`) written next to the job's work files.
-- Returns one row: number of ids that occur more than once, rows beyond the first of each, and
-- the smallest such id (NULL when there is none).
-- Parameters: $paths, $columns ({id column: type}), $candidates_path (as scan.duckdb_path gives).
SELECT count(*) AS num_ids, coalesce(sum(num_rows - 1), 0) AS num_extra_rows, min(id) AS example
FROM (
    SELECT CAST(id AS BIGINT) AS id, count(*) AS num_rows
    FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(id)
    WHERE CAST(id AS BIGINT) IN (SELECT id FROM read_parquet($candidates_path))
    GROUP BY ALL
    HAVING count(*) > 1
)
