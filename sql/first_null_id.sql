-- first_null_id: how many ids are NULL and where the first one is (only run to word an error).
-- Returns at most one row: file index in $paths, row number inside that file, number of NULL ids.
-- Parameters: $paths, $columns ({id column: type}).
SELECT file_index, file_row_number, count(*) OVER () AS num_null
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(id)
WHERE id IS NULL
ORDER BY file_index, file_row_number
LIMIT 1
