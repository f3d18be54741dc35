-- first_bad_length_of_lists: first_bad_length.sql for a length column of token lists: where
-- the first NULL or empty list is (only run to word an error).
-- Returns at most one row: the file's index in $paths, the row number inside that file, the
-- list's length (NULL for a NULL list).
-- Parameters: $paths, $columns ({length column: its DuckDB list type}).
SELECT file_index, file_row_number, len(tokens) AS length
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(tokens)
WHERE tokens IS NULL OR len(tokens) = 0
ORDER BY file_index, file_row_number
LIMIT 1
