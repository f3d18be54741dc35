-- length_histogram_of_lists: length_histogram.sql for a length column of token lists (LIST or
-- LARGE_LIST of integers, e.g. `input_ids`): a sequence's length is its number of elements,
-- counted by DuckDB (len), so no token leaves DuckDB. A NULL list has a NULL length and an empty
-- one length 0, both refused by the caller like any bad length.
-- One row per distinct length (NULL included) with its number of rows.
-- Parameters: $paths, $columns ({length column: its DuckDB list type, e.g. INTEGER[]}).
SELECT len(tokens) AS length, count(*) AS num_rows
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(tokens)
GROUP BY ALL
