-- id_locations: the first rows that hold a given id (only run to word a duplicate-id error).
-- Parameters: $paths, $columns ({id column: type}), $id.
SELECT file_index, file_row_number
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(id)
WHERE CAST(id AS BIGINT) = $id
ORDER BY file_index, file_row_number
LIMIT 2
