"""Loader throughput and memory per worker, on shards written by the data tool.

    .venv/bin/python -m bench.bench_loader                          # makes its own shards
    .venv/bin/python -m bench.bench_loader --data_dir /data/shards  # real shards

Each measurement runs in a fresh process (so peak RSS is that loader's): the real path —
``ShardStream`` (HDF5 read + gzip inflate in the prefetch thread, per-batch label building,
int64 conversion) behind a ``DataLoader`` with ``--num_workers`` 0 and 1. Compared with what
one trn1.32xlarge worker consumes at the published 3,826.6 seq/s per node (32 workers):
~120 seq/s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PUBLISHED_NODE_SEQ_PER_S = 3826.6  # Neuron 2.28, one trn1.32xlarge, BERT-large phase 1
WORKERS_PER_NODE = 32


def measure(data_dir: str, num_workers: int, batch_size: int, batches: int) -> dict:
    """Runs in the child process: time ``batches`` batches after the first one."""
    import torch

    from training.trainer.data import ShardStream, list_shards, make_loader

    torch.set_num_threads(1)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stream = ShardStream(list_shards(data_dir), batch_size=batch_size, seq_len=128, max_pred_len=20, seed=1)
    it = iter(make_loader(stream, num_workers=num_workers))
    t0 = time.perf_counter()
    next(it)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    shards_seen = set()
    for _ in range(batches):
        b = next(it)
        shards_seen.add(tuple(b["data_position"][:2].tolist()))
    dt = time.perf_counter() - t0
    loader_hwm = None
    workers = getattr(it, "_workers", [])  # DataLoader internals; bench only
    if workers:  # the loader process is alive: read its high-water RSS from /proc
        for line in Path(f"/proc/{workers[0].pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                loader_hwm = int(line.split()[1]) / 1024
    return {
        "num_workers": num_workers,
        "seq_per_s": batches * batch_size / dt,
        "first_batch_s": first,
        "pieces_crossed": len(shards_seen),
        "rss_after_imports_mib": base_rss / 1024,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_loader_process_mib": loader_hwm,
    }


def synthetic_shards(root: Path, docs: int, shards: int) -> str:
    # Imported here: a --child measures its memory after imports, without the vocab trainer's.
    from training.dataprep.synthetic import make_shards

    flags = {"num_shards": shards, "dupe_factor": 5}
    return str(make_shards(root, n_docs=docs, flags=flags, corpus_seed=1, vocab_size=2000).dir)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", help="existing *_training_*.hdf5 shards (default: make some)")
    p.add_argument("--docs", type=int, default=6000, help="documents of the synthetic corpus")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:  # one measurement, JSON on stdout
        print(json.dumps(measure(args.data_dir, int(args.child), args.batch_size, args.batches)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or synthetic_shards(Path(tmp), args.docs, args.shards)
        import h5py

        from training.trainer.data import list_shards

        files = list_shards(data_dir)
        sizes = []
        for f in files:
            with h5py.File(f, "r") as h:
                sizes.append(len(h["next_sentence_labels"]))
        mem_per_sample = 128 * (4 + 1 + 1) + 20 * (4 + 4) + 1
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
        print(
            f"shards: {len(files)} in {data_dir}, {sum(sizes)} samples, {min(sizes)}-{max(sizes)} per shard, "
            f"{mem_per_sample} B/sample in memory -> {max(sizes) * mem_per_sample / 2**20:.1f} MiB per shard"
        )
        demand = PUBLISHED_NODE_SEQ_PER_S / WORKERS_PER_NODE
        for workers in (0, 1):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.bench_loader",
                    "--child",
                    str(workers),
                    "--data_dir",
                    data_dir,
                    "--batch_size",
                    str(args.batch_size),
                    "--batches",
                    str(args.batches),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"num_workers={workers}: {r['seq_per_s']:9.0f} seq/s per training worker "
                f"({r['seq_per_s'] / demand:5.0f}x the {demand:.0f} seq/s a trn1 worker needs), "
                f"first batch {r['first_batch_s']:.2f}s, {r['pieces_crossed']} shard(s) crossed, "
                f"peak RSS {r['peak_rss_mib']:.0f} MiB (after imports {r['rss_after_imports_mib']:.0f})"
                + (
                    f", loader process {r['peak_rss_loader_process_mib']:.0f} MiB"
                    if r["peak_rss_loader_process_mib"]
                    else ""
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
