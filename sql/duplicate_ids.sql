-- duplicate_ids: which candidate ids really occur more than once (exact).
-- The pools pass flags candidates with a bitmap; this check runs only when it flagged some. The
-- candidates come as a parquet file (one BIGINT column `id`) written next to the job's work files.
-- Returns one row: number of ids that occur more than once, rows beyond the first of each, and
-- the smallest such id (NULL when there is none).
-- Parameters: $paths, $id_column, $candidates_path.
SELECT count(*) AS num_ids, coalesce(sum(num_rows - 1), 0) AS num_extra_rows, min(id) AS example
FROM (
    SELECT id, count(*) AS num_rows
    FROM (
        SELECT CAST(COLUMNS([$id_column]) AS BIGINT) AS id
        FROM read_parquet($paths, hive_partitioning = false)
    )
    WHERE id IN (SELECT id FROM read_parquet($candidates_path))
    GROUP BY id
    HAVING count(*) > 1
)
