"""What integrity checking adds to a BERT-large checkpoint save: hash vs. write.

    .venv/bin/python -m bench.bench_checkpoint                    # everything, one process
    .venv/bin/python -m bench.bench_checkpoint --only-save sha256 # one save (for a whole-process A/B)
    .venv/bin/python -m bench.bench_checkpoint --only-save none

The state is BERT-large's (bert-large-uncased config, ``BertForPreTraining``: the shapes come
from the model built on the meta device, the values are random): fp32 weights plus AdamW's two
fp32 moments, the largest checkpoint the script writes (fp32 training, or bf16 with
``--fp32_master_weights``; plain bf16 is half of it). It is saved the way ``state.pt`` is:
``training.trainer.checkpoint.write_file_durably`` (temp file, fsync, rename), which hashes the bytes on
their way to the file; ``none`` writes the same bytes without hashing. Also printed: each hash
over the serialized bytes in memory, and ``verify`` (read back and hash, as loading does).

The file goes to ``--dir`` (default: a temporary directory on this machine's disk, removed
after); the write time is this disk's, not FSx's. Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

from training.trainer import checkpoint as ckpt

HASHES = {
    "sha256": lambda b: hashlib.sha256(b).hexdigest(),
    "blake2b": lambda b: hashlib.blake2b(b).hexdigest(),
    "crc32": lambda b: zlib.crc32(b),
}


def bert_large_state() -> dict:
    """Weights + AdamW moments, fp32, BERT-large shapes (tied embeddings counted once)."""
    from training.trainer.model import build_model

    with torch.device("meta"):
        module = build_model("large")
    shapes = {}
    seen = set()
    for name, p in module.hf_model.named_parameters():  # named_parameters lists a tied tensor once
        if id(p) not in seen:
            seen.add(id(p))
            shapes[name] = p.shape
    torch.manual_seed(0)
    make = lambda: {n: torch.empty(s).uniform_(-0.05, 0.05) for n, s in shapes.items()}  # noqa: E731
    weights = make()
    moments = {
        i: {"step": torch.tensor(200.0), "exp_avg": t, "exp_avg_sq": make_sq}
        for i, (t, make_sq) in enumerate(zip(make().values(), make().values(), strict=True))
    }
    return {"model": weights, "optimizer": {"state": moments, "param_groups": []}}


def save(state: dict, path: Path, how: str) -> float:
    t = time.perf_counter()
    if how == "sha256":
        ckpt.write_file_durably(path, lambda f: torch.save(state, f))
    else:  # the same temp-file/fsync/rename protocol, bytes not hashed
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        ckpt.fsync_dir(path.parent)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating saves with and without hashing")
    ap.add_argument("--only-save", choices=("sha256", "none"), default=None, help="one save, then exit")
    args = ap.parse_args()
    state = bert_large_state()
    n_params = sum(t.numel() for t in state["model"].values())
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "state.pt"
        if args.only_save:
            print(json.dumps({"save": args.only_save, "seconds": save(state, path, args.only_save)}))
            return 0
        times: dict[str, list[float]] = {"sha256": [], "none": []}
        for _ in range(args.rounds):  # A B A B ...: the ratio holds when the machine's speed drifts
            for how in ("sha256", "none"):
                times[how].append(save(state, path, how))
                path.unlink()
        size = save(state, path, "none") and path.stat().st_size
        t = time.perf_counter()
        ckpt.file_digest(path)
        verify_s = time.perf_counter() - t
        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getbuffer()
        hash_s = {}
        for name, fn in HASHES.items():
            t = time.perf_counter()
            fn(data)
            hash_s[name] = time.perf_counter() - t
        del data
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, torch {torch.__version__}",
        "parameters": n_params,
        "state_bytes": size,
        "save_s_sha256": times["sha256"],
        "save_s_plain": times["none"],
        "save_ratio_sha256_over_plain_median": med["sha256"] / med["none"],
        "write_MB_per_s_plain_median": size / med["none"] / 1e6,
        "hash_in_memory_s": hash_s,
        "hash_MB_per_s": {k: size / v / 1e6 for k, v in hash_s.items()},
        "verify_read_back_sha256_s": verify_s,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
