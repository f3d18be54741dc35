-- pool_rows_by_id_of_lists: pool_rows_by_id.sql for a length column of token lists (the length
-- is the number of elements, DuckDB's len).
-- Parameters: $paths, $columns ({length column: list type, id column: type}, in that order),
-- $max_seq_len, $truncate.
-- ($max_seq_len and $truncate are over_cap.OverCap.sql_params(): the rule decides, not the caller.)
SELECT CAST(least(len(tokens), $max_seq_len) AS INTEGER) AS length, CAST(id AS BIGINT) AS id
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(tokens, id)
WHERE $truncate OR len(tokens) <= $max_seq_len
