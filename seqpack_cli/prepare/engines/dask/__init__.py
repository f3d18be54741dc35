"""`seqpack prepare --engine dask`: prepare's passes as tasks on a Dask cluster.

Dask schedules the tasks, retries those whose worker died, and reports; each task runs the
project's own SQL (`sql/`, through `prepare.db`) with DuckDB on its group of files, so every
query has one definition. The output is byte-identical to the local engine's whatever the number
of workers and file groups. Inputs and output live on a filesystem every worker sees at the same
path; the driver reads only the small results of the tasks, never a row.

- `tuning`: `ClusterTuning`, the sizes the work is cut into;
- `groups`: the cuts (file groups, merge units, id ranges), decided on the driver;
- `tasks`: the small tasks (footers, histograms, where an id is) and what every task shares;
- `pool_tasks`: a file group's ids ordered into runs; `merge`: merging runs, counting repeats;
  `merge_tasks`: the pool files merged from the runs, and the duplicate-id checks;
- `client`: connecting to a scheduler or starting a local cluster, and Dask's errors worded;
- `task_runner`: a run's tasks submitted under keys of their own, gathered with progress;
- `driver`: `ClusterEngine`, the phases submitted, gathered and checked as the local job does;
- `handshake`: `check_scheduler`, that `--scheduler` names a Dask scheduler, in a bounded wait;
- `fingerprints`: what the driver saw of each input, checked by every task before it reads;
- `group_sort`: a file group's ids ordered in memory (groups that fit `ClusterTuning.memory_ids`);
- `--over-cap split`: `split_tasks` (the checked store's rows cut into pieces), `split_driver`
  (the phases);
- the token store (`--tokens-column`): `store_footers` (the inputs' footers and value ranges),
  `store_tasks` (a file group streamed into place), `store_index` (the id index, the hashes),
  `store_faults` (faults worded by the local store's code), `store_driver` (the phases).

Nothing here is imported by `import seqpack_cli`, and Dask only once the engine starts.
"""
