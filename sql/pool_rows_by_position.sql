-- pool_rows_by_position: the streaming pass of `seqpack prepare` without an id column.
-- (length, file index, row number in that file) of every sequence kept; the caller turns the
-- last two into a global row index (the id) with the per-file row counts from the parquet
-- footers, so ids do not depend on threads or on the order rows are streamed in. Sequences
-- longer than $max_seq_len are left out, or, with $truncate, kept with the length $max_seq_len
-- (as in pool_rows_by_id.sql).
-- file_index and file_row_number are DuckDB's virtual columns: only the length column is bound.
-- Parameters: $paths, $columns ({length column: type}), $max_seq_len, $truncate.
-- ($max_seq_len and $truncate are over_cap.OverCap.sql_params(): the rule decides, not the caller.)
SELECT CAST(least(length, $max_seq_len) AS INTEGER) AS length, file_index, file_row_number
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(length)
WHERE $truncate OR length <= $max_seq_len
