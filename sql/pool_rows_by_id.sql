-- pool_rows_by_id: the streaming pass of `seqpack prepare` when ids come from an id column.
-- (length, id) of every sequence kept; the caller scatters ids into pools, so the row order
-- DuckDB streams them in does not matter. Sequences longer than $max_seq_len are left out, or,
-- with $truncate (`--over-cap truncate`), kept with the length $max_seq_len. DuckDB folds
-- $truncate before it plans, so without it the filter is pushed into the parquet reader.
-- Lengths come out as INTEGER (max_seq_len < 2**31): least() of a UBIGINT and an integer
-- would be a HUGEINT.
-- Parameters: $paths, $columns ({length column: type, id column: type}, in that order),
-- $max_seq_len, $truncate.
-- ($max_seq_len and $truncate are over_cap.OverCap.sql_params(): the rule decides, not the caller.)
SELECT CAST(least(length, $max_seq_len) AS INTEGER) AS length, CAST(id AS BIGINT) AS id
FROM read_parquet($paths, hive_partitioning = false, bound_schema = $columns) AS input(length, id)
WHERE $truncate OR length <= $max_seq_len
