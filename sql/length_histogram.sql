-- length_histogram: the first, cheap pass of `seqpack prepare`.
-- One row per distinct value of the length column (NULL included) with its number of rows, so bad
-- lengths (NULL, <= 0, over the cap) are known before any heavy work.
-- Parameters: $paths (parquet files, sorted), $length_column (column name).
SELECT
    COLUMNS([$length_column]) AS length,
    count(*) AS num_rows
FROM read_parquet($paths, hive_partitioning = false)
GROUP BY ALL
