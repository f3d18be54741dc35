-- first_null_id: how many ids are NULL and where the first one is (only run to word an error).
-- Returns at most one row: file index in $paths, row number inside that file, number of NULL ids.
-- Parameters: $paths, $id_column.
SELECT file_index, file_row_number, count(*) OVER () AS num_null
FROM (
    SELECT COLUMNS([$id_column]) AS id, file_index, file_row_number
    FROM read_parquet($paths, file_row_number = true, hive_partitioning = false)
)
WHERE id IS NULL
ORDER BY file_index, file_row_number
LIMIT 1
