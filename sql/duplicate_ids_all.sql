-- duplicate_ids_all: ids that occur more than once, over all rows (exact, through DuckDB's hash
-- aggregate, which spills to temp_directory under memory_limit). Used only when ids are too sparse
-- and too many for the pools pass's bitmap to narrow the candidates down.
-- Returns one row: number of ids that occur more than once, rows beyond the first of each, and
-- the smallest such id (NULL when there is none).
-- Parameters: $paths, $id_column.
SELECT count(*) AS num_ids, coalesce(sum(num_rows - 1), 0) AS num_extra_rows, min(id) AS example
FROM (
    SELECT id, count(*) AS num_rows
    FROM (
        SELECT CAST(COLUMNS([$id_column]) AS BIGINT) AS id
        FROM read_parquet($paths, hive_partitioning = false)
    )
    GROUP BY id
    HAVING count(*) > 1
)
