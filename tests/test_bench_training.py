"""benchmarks/bench_training.py: its smoke run, its batches and its hand-written varlen reference.

The smoke run (a tiny Llama on CPU) runs in a subprocess where duckdb, polars, typer and rich
cannot be imported, as on the GPU machine. Every packed method there trains the same bins from the
same weights, so their losses agree: a method whose batches or mask were wrong would differ. The
batch builders are checked as properties (hypothesis); the reference attention is checked on CPU
with a stand-in for `varlen_attn` that computes each sequence alone. The `gpu` test runs the
benchmark itself on CUDA with a tiny model.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import load_benchmark
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "bench_training.py"
PACKED = ("hf_sdpa", "bias", "seqpack_varlen", "seqpack_varlen_static")
# Run as the GPU machine would: the runtime part of seqpack only.
BLOCKED = "import sys; sys.modules.update(duckdb=None, polars=None, typer=None, rich=None); "


bench = load_benchmark("bench_training")


def run_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    code = BLOCKED + (
        f"sys.argv = [{str(SCRIPT)!r}, *{list(args)!r}]; "
        f"import runpy; runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )


def rows_of(json_path: Path) -> dict[str, dict[str, Any]]:
    (line,) = json_path.read_text().splitlines()
    return {row["method"]: row for row in json.loads(line)["methods"]}


def test_smoke_trains_every_cpu_method_without_duckdb_polars_typer_rich(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    done = run_script("--smoke", "--json", str(out))
    assert done.returncode == 0, done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(bench.METHODS)  # the header row, then one row per method
    rows = rows_of(out)
    assert list(rows) == list(bench.METHOD_KEYS)
    for key in ("flex", "varlen_direct"):  # CUDA only: skipped, saying why
        assert rows[key]["status"].startswith("skipped: "), rows[key]
    ran = [key for key in rows if key not in ("flex", "varlen_direct")]
    for key in ran:
        row = rows[key]
        assert row["status"] == "ok", row
        assert row["tokens_per_s"] > 0 and row["step_s"] > 0
        assert 0 < row["slot_fill"] <= 1
        assert np.isfinite(row["mean_loss"])
    assert rows["padded_random"]["vs_padded_random"] == pytest.approx(1.0)
    # The packed methods train the same bins from the same weights: the same real tokens, and
    # losses equal up to float32 rounding (pad_to only adds untargeted padding).
    packed = [rows[key] for key in PACKED]
    assert len({row["real_tokens_per_step"] for row in packed}) == 1
    losses = [row["mean_loss"] for row in packed]
    assert max(losses) - min(losses) < 1e-5, losses
    assert rows["hf_sdpa"]["slot_fill"] == 1.0  # flattened: no padding computed


@pytest.mark.skipif(torch.cuda.is_available(), reason="refuses only without a GPU")
def test_without_a_gpu_it_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("bench_training.py needs a CUDA GPU (")
    assert err.rstrip().endswith("use --smoke for the CPU configuration")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--methods", "bias,nope"], "--methods: 'bias,nope'"),
        (["--steps", "0"], "--steps: '0'"),
        (["--smoke", "--model-size", "1b"], "--model-size 1b"),
        (["--distribution", "sft", "--prepared", "x"], "--prepared and --distribution"),
    ],
)
def test_bad_options_are_one_line_naming_the_option(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err


def test_too_few_sequences_for_the_steps_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--smoke", "--num-sequences", "3", "--methods", "bias"]
    assert bench.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "raise --num-sequences" in err, err


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB"), "OOM"),
        (RuntimeError("CUBLAS_STATUS_ALLOC_FAILED: out of memory"), "OOM"),
        (ValueError("a bad\nvalue"), "failed: ValueError: a bad value"),
    ],
)
def test_a_method_that_fails_is_a_row_not_a_crash(
    error: Exception, status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object) -> None:
        raise error

    monkeypatch.setattr(bench, "train", fail)
    env = bench.Env(torch.device("cpu"), torch.float32, cuda=False)
    options = argparse.Namespace(warmup=1, steps=1, seed=0)
    bias = next(m for m in bench.METHODS if m.key == "bias")
    model = torch.nn.Linear(2, 2)
    result = bench.run_method(model, {}, bias, small_workload(), options, env)
    assert result.status == status


lengths_strategy = st.lists(st.integers(1, 64), min_size=1, max_size=200).map(
    lambda values: np.asarray(values, dtype=np.int64)
)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_strategy, rows=st.integers(1, 8), seed=st.integers(0, 3))
def test_token_budget_batches_partition_the_ids_within_the_budget(
    lengths: np.ndarray, rows: int, seed: int
) -> None:
    max_tokens = rows * 64
    batches = bench.token_budget_batches(lengths, max_tokens, seed)
    ids = np.concatenate(batches)
    assert sorted(ids.tolist()) == list(range(lengths.shape[0]))
    for batch in batches:
        assert len(batch) * int(lengths[batch].max()) <= max_tokens
    # greedy, in length order: a batch closes only when the next sequence would not fit (the
    # batches in length order again; among equal longest lengths the short last one goes last)
    by_length = sorted(batches, key=lambda b: (int(lengths[b].max()), -len(b)))
    for batch, following in itertools.pairwise(by_length):
        nxt = int(lengths[following].min())
        if nxt >= int(lengths[batch].max()):
            assert (len(batch) + 1) * nxt > max_tokens


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_strategy, rows=st.integers(1, 8), seed=st.integers(0, 3))
def test_random_and_length_grouped_batches_partition_the_ids(
    lengths: np.ndarray, rows: int, seed: int
) -> None:
    for batches in (
        bench.random_batches(lengths, rows, seed),
        bench.length_grouped_batches(lengths, rows, seed),
    ):
        ids = np.concatenate(batches)
        assert sorted(ids.tolist()) == list(range(lengths.shape[0]))
        assert all(len(b) == rows for b in batches[:-1]) and 0 < len(batches[-1]) <= rows


def small_workload(rows: int = 2, max_seq_len: int = 64, seed: int = 0) -> Any:
    lengths = np.random.default_rng(seed).integers(1, max_seq_len + 1, 300)
    return bench.build_workload(lengths, max_seq_len, rows, 100, seed, "test")


@pytest.mark.parametrize("key", bench.PADDED)
def test_padded_steps_pad_each_row_to_the_longest_and_never_target_padding(key: str) -> None:
    workload = small_workload()
    steps = bench.padded_steps(workload, key, 4, seed=1)
    assert len(steps) == 4
    for step in steps:
        mask, labels, ids = (step.batch[k] for k in ("attention_mask", "labels", "input_ids"))
        assert step.real_tokens == int(mask.sum()) and step.slots == mask.numel()
        assert bool(mask[:, 0].all()) and int(mask.sum(1).max()) == mask.shape[1]
        assert bool((labels[mask == 0] == -100).all())
        targets = (mask == 1) & (torch.arange(mask.shape[1]) > 0)
        assert torch.equal(labels[targets], ids[targets])


def test_packed_steps_take_the_same_bins_for_every_method() -> None:
    workload = small_workload(rows=3)
    plain = bench.packed_steps(workload, "seqpack_varlen", 2)
    static = bench.packed_steps(workload, "seqpack_varlen_static", 2)
    bias = bench.packed_steps(workload, "bias", 2)
    for a, b, c in zip(plain, static, bias, strict=True):
        assert a.real_tokens == b.real_tokens == c.real_tokens == a.batch["input_ids"].shape[1]
        assert b.batch["input_ids"].shape == (1, 3 * 64) == (1, b.slots)
        assert c.batch["input_ids"].shape == (3, 64) and c.slots == 3 * 64
        assert set(c.batch) == {"input_ids", "labels", "position_ids", "sequence_ids"}


def test_sample_lengths_follows_the_histogram_cut_to_max_seq_len() -> None:
    lengths = bench.sample_lengths({3: 5, 10: 5, 900: 10}, 1000, 512, seed=2)
    assert lengths.shape == (1000,) and set(lengths.tolist()) == {3, 10, 512}
    assert abs(int((lengths == 512).sum()) - 500) < 80


def fake_varlen_attn(window_name: str) -> Any:
    """A CPU stand-in for varlen_attn: causal sdpa on each sequence alone, in either signature
    (q, k, v `[tokens, heads, dim]`, then cu_seq_q, cu_seq_k, max_q, max_k)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def attend(*tensors: Any, scale: Any, enable_gqa: bool, **causal: Any) -> Any:
        q, k, v, cu_q, cu_k, max_q, max_k = tensors
        assert causal in ({"window_size": (-1, 0)}, {"is_causal": True})
        assert torch.equal(cu_q, cu_k) and max_q == max_k == int((cu_q[1:] - cu_q[:-1]).max())
        out = torch.empty_like(q)
        for start, stop in zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), strict=True):
            part = [x[start:stop].transpose(0, 1) for x in (q, k, v)]  # [heads, len, dim]
            alone = sdpa(*part, is_causal=True, scale=scale, enable_gqa=enable_gqa)
            out[start:stop] = alone.transpose(0, 1)
        return out

    if window_name == "is_causal":  # torch 2.10's signature: no window_size, no enable_gqa

        def old(*tensors: Any, scale: Any = None, is_causal: bool = False) -> Any:
            return attend(*tensors, scale=scale, enable_gqa=False, is_causal=is_causal)

        return old

    def new(
        *tensors: Any, scale: Any = None, window_size: Any = (-1, -1), enable_gqa: bool = False
    ) -> Any:
        return attend(*tensors, scale=scale, enable_gqa=enable_gqa, window_size=window_size)

    return new


@pytest.mark.parametrize("signature", ["window_size", "is_causal"])
@pytest.mark.parametrize("num_kv_heads", [4, 2])
def test_hand_written_reference_equals_each_sequence_alone(
    signature: str, num_kv_heads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.nn.attention.varlen as varlen
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setattr(varlen, "varlen_attn", fake_varlen_attn(signature))
    bench.varlen_parameters.cache_clear()
    try:
        config = LlamaConfig(**bench.MODEL_SIZES["tiny"], num_key_value_heads=num_kv_heads)
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).double().eval()
        model.set_attn_implementation(bench.attn_implementation("varlen_direct"))
        lengths = [5, 1, 9, 3]
        seqs = [torch.randint(0, 512, (n,)) for n in lengths]
        collate = bench.PackedCollator([s.numpy() for s in seqs], 32, 0, format="hf")
        batch = collate([[0, 1, 2, 3]])
        batch.pop("seq_idx")
        packed = model(**batch, use_cache=False).logits[0]
        model.set_attn_implementation("sdpa")
        alone = torch.cat([model(input_ids=s[None], use_cache=False).logits[0] for s in seqs])
    finally:
        bench.varlen_parameters.cache_clear()
    assert torch.allclose(packed, alone, atol=1e-10, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_benchmark_runs_every_method_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    args = ["--model-size", "tiny", "--max-seq-len", "512", "--rows-per-step", "4"]
    args += ["--num-sequences", "3000", "--warmup", "2", "--steps", "3", "--json", str(out)]
    done = run_script(*args, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = rows_of(out)
    assert all(row["status"] == "ok" for row in rows.values()), rows
    assert all(row["peak_gib"] > 0 for row in rows.values())
    # the same bins from the same weights: losses within bf16 rounding across attentions
    losses = [rows[key]["mean_loss"] for key in (*PACKED, "flex", "varlen_direct")]
    assert max(losses) - min(losses) < 0.05, losses


def test_lengths_from_a_prepared_directory(
    prepared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--smoke", "--prepared", str(prepared_dir), "--methods", "bias,seqpack_varlen"]
    assert bench.main([*args, "--warmup", "0", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert f"prepared {prepared_dir}" in out
    rows = [line for line in out.splitlines() if line.startswith("| seqpack")]
    assert len(rows) == 2 and not any("skipped" in r or "failed" in r for r in rows), out
