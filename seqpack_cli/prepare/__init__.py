"""The batch job behind `seqpack prepare`: parquet or JSON Lines files, or in-memory tables ->
a `prepared/` directory.

- `job`: `prepare_dataset` (footers, length histogram, packing, the pools pass, the atomic
  write); `config`: `PrepareConfig`, every option validated once;
- `engines` (subpackage): where the passes run, behind one protocol (`local`: in this process;
  `dask`: as tasks on a Dask cluster);
- `inputs`: files, globs and directories -> a sorted list of parquet and JSON Lines files;
  `input_batches`: one input of either kind read in batches, its kind and row count;
  `jsonl_staging`: a JSON Lines input's columns copied to parquet for DuckDB; `footers`: the
  inputs' footers read and checked before DuckDB reads a row; `db`: DuckDB connections, the SQL
  of `sql/`, DuckDB's errors worded; `process_folders`: scratch folders that live as long as
  the process (DuckDB's links, the JSON Lines copies); `memory_inputs`: in-memory tables
  (pyarrow, Polars, datasets) written as parquet into the job's work directory, then read as
  files;
  `remote_inputs`: remote objects (s3://, gs://, https://, hf://) resolved by
  `seqpack_cli.remote`, the columns read copied once into the work directory;
- `scan`: the first pass, the length histogram; `pools` (subpackage): the second pass, the
  `pools/{length}.npy` files;
- the token store (`--tokens-column`): `one_pass` reads the token column once
  (`token_stream` decodes it in threads, `ordered` hands the work units over in order,
  `token_batches` checks each batch: the one batch kernel, the Dask store tasks' too) and
  `streamed_store` writes the store as it streams, through `store_files` (the store files'
  `.npy` headers; files written and hashed front to back); `pieces`: the ids and table of the
  pieces of split sequences (both engines); `length_counter`: the histogram counted in memory
  that follows the distinct lengths (the one pass, and the Dask driver's sum of its groups');
  `token_store` is the store of the two-pass job; `num_targets`: the `num_targets.npy`
  post-pass of every store;
- text in (`--tokenizer`): `tokenize_options` (`TokenizeOptions`), `text_inputs` (the text
  columns checked in the footers), `tokenized_pass` (the text read once, tokenized by
  `seqpack_cli.tokenize`, stored as the one pass stores a token column);
- `token_files`: `write_token_source`, a token source kept beside a prepared directory, read by
  `token_reading` in bounded memory;
- `__main__`: `python -m seqpack_cli.prepare --input ...`, the reference's spelling of the command.

`load_prepared` is re-exported here under the reference's path (`seqpack_cli.prepare`).
"""

from __future__ import annotations

from seqpack_cli.prepare.config import PACKERS, PrepareConfig
from seqpack_cli.prepare.job import prepare_dataset
from seqpack_cli.prepared import load_prepared

__all__ = ["PACKERS", "PrepareConfig", "load_prepared", "prepare_dataset"]
