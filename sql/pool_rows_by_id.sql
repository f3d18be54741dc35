-- pool_rows_by_id: the streaming pass of `seqpack prepare` when ids come from an id column.
-- (length, id) of every sequence that fits max_seq_len; the caller scatters ids into pools, so the
-- row order DuckDB streams them in does not matter.
-- Parameters: $paths, $columns ({length column: type, id column: type}, in that order),
-- $max_seq_len.
SELECT length, CAST(id AS BIGINT) AS id
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(length, id)
WHERE length <= $max_seq_len
