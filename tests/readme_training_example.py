"""Training with seqpack: a prepared directory -> a DataLoader -> model inputs.

The README's "Training with seqpack" example, runnable on its own:
`python tests/readme_training_example.py` (it works in a temporary directory).
"""

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from torch.utils.data import DataLoader

from seqpack_cli.data import PackedIterableDataset
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import load_prepared


def main(work: Path) -> None:
    # 1. A tiny tokenised dataset: one row per sequence, its tokens and its length.
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 60, size=200)
    token_lists = [rng.integers(1, 32_000, size=n).tolist() for n in lengths]
    table = pa.table({"input_ids": token_lists, "num_tokens": lengths})
    pq.write_table(table, work / "train.parquet")

    # 2. Prepare once (offline): length histogram -> templates -> pools, written to disk.
    #    CLI equivalent: seqpack prepare train.parquet --length-column num_tokens
    #                    --max-seq-len 128 --output prepared
    prepare_dataset(
        PrepareConfig(
            inputs=[work / "train.parquet"],
            length_column="num_tokens",
            max_seq_len=128,
            output=work / "prepared",
        )
    )

    # 3. At training time: load the index (pools are memory-mapped) and the tokens. Without
    #    --id-column, a sequence's id is its row number across the input files.
    prepared = load_prepared(work / "prepared")
    tokens = pq.read_table(work / "train.parquet", columns=["input_ids"])["input_ids"].to_pylist()

    # 4. One packed row per bin; rank/world_size come from torch.distributed when initialised.
    dataset = PackedIterableDataset(prepared, tokens, pad_token_id=0, seed=1234)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)

    for epoch in range(2):
        dataset.set_epoch(epoch)  # new pairings and order every epoch
        for step, batch in enumerate(loader):
            if step == 0:
                print(f"epoch {epoch}: {len(dataset)} packed rows")
                for name, value in batch.items():
                    shape = tuple(value.shape) if hasattr(value, "shape") else value
                    print(f"  {name:15} {shape}")
            # model(input_ids=batch["input_ids"], labels=batch["labels"],
            #       position_ids=batch["position_ids"], attention_mask=batch["attention_mask"])
            if step == 4:
                # A checkpoint: a few integers. With num_workers > 0, pass the rows taken.
                state = dataset.state_dict(num_bins_taken=step + 1)
        print(f"  state after 5 rows: {state}")

    # Resume: a new process loads the state and sees exactly the rest of that epoch.
    resumed = PackedIterableDataset(prepared, tokens, pad_token_id=0, seed=1234)
    resumed.load_state_dict(state)
    print(f"resumed epoch {state['epoch']}: {len(resumed)} rows left")


if __name__ == "__main__":  # the guard matters: DataLoader workers may re-import this file
    with tempfile.TemporaryDirectory() as scratch:
        main(Path(scratch))
