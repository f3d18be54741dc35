-- duplicate_ids_all: ids that occur more than once, over all rows (exact, through DuckDB's hash
-- aggregate, which spills to temp_directory under memory_limit). Used only when ids are too sparse
-- and too many for the pools pass's bitmap to narrow the candidates down.
-- Returns one row: number of ids that occur more than once, rows beyond the first of each, and
-- the smallest such id (NULL when there is none).
-- Parameters: $paths, $columns ({id column: type}).
SELECT count(*) AS num_ids, coalesce(sum(num_rows - 1), 0) AS num_extra_rows, min(id) AS example
FROM (
    SELECT CAST(id AS BIGINT) AS id, count(*) AS num_rows
    FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(id)
    GROUP BY ALL
    HAVING count(*) > 1
)
