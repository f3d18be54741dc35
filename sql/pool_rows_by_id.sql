-- pool_rows_by_id: the streaming pass of `seqpack prepare` when ids come from an id column.
-- (length, id) of every sequence that fits max_seq_len; the caller scatters ids into pools, so the
-- row order DuckDB streams them in does not matter.
-- Parameters: $paths, $length_column, $id_column, $max_seq_len.
SELECT length, id
FROM (
    SELECT
        COLUMNS([$length_column]) AS length,
        CAST(COLUMNS([$id_column]) AS BIGINT) AS id
    FROM read_parquet($paths, hive_partitioning = false)
)
WHERE length <= $max_seq_len
