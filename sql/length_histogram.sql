-- length_histogram: the first, cheap pass of `seqpack prepare`.
-- One row per distinct value of the length column (NULL included) with its number of rows, so bad
-- lengths (NULL, <= 0, over the cap) are known before any heavy work.
-- Parameters: $paths (parquet files as DuckDB reads them, sorted), $columns ({length column: its
-- DuckDB type}: bound_schema binds only the columns read, `input(...)` renames them; see scan.py).
SELECT length, count(*) AS num_rows
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(length)
GROUP BY ALL
