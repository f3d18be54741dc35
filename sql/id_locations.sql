-- id_locations: the first rows that hold a given id (only run to word a duplicate-id error).
-- Parameters: $paths, $id_column, $id.
SELECT file_index, file_row_number
FROM (
    SELECT CAST(COLUMNS([$id_column]) AS BIGINT) AS id, file_index, file_row_number
    FROM read_parquet($paths, file_row_number = true, hive_partitioning = false)
)
WHERE id = $id
ORDER BY file_index, file_row_number
LIMIT 2
