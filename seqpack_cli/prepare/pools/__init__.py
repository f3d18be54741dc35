"""The pools pass: (length, id) rows -> one ascending `pools/{length}.npy` per length.

- `scan`: `scan_pools`, the streaming pass and the choice between the two fill methods;
- `id_map`: dense id spans, appended straight to the pool files;
- `scatter`, `split`: sparse ids, scattered to a work file, then sorted and cut into pools;
- `ascending`: `append_ascending`, chunks whose ids already come in order (the one pass);
- `stream`: DuckDB's result streamed as numpy batches, decoded one step ahead;
- `tuning`: `PoolTuning`, the sizes the pass works in;
- `offsets`: the pools' offsets in the work file, shared by both; `id_checks`: duplicate ids.
"""
