-- first_bad_length: where the first NULL or non-positive length is (only run to word an error).
-- Returns at most one row: the file's index in $paths, the row number inside that file, the value.
-- file_index and file_row_number are DuckDB's virtual columns: only the length column is bound.
-- Parameters: $paths, $columns ({length column: type}).
SELECT file_index, file_row_number, length
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(length)
WHERE length IS NULL OR length <= 0
ORDER BY file_index, file_row_number
LIMIT 1
