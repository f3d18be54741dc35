-- first_bad_length: where the first NULL or non-positive length is (only run to word an error).
-- Returns at most one row: the file's index in $paths, the row number inside that file, the value.
-- Parameters: $paths, $length_column.
SELECT file_index, file_row_number, length
FROM (
    SELECT COLUMNS([$length_column]) AS length, file_index, file_row_number
    FROM read_parquet($paths, file_row_number = true, hive_partitioning = false)
)
WHERE length IS NULL OR length <= 0
ORDER BY file_index, file_row_number
LIMIT 1
