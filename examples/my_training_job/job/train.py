"""A training program of your own, as TrainiumTrainingJob runs it: under torchrun on every node.

It fits a small linear model to a fixed synthetic regression with DistributedDataParallel, on
Trainium through torch-xla when the image has it and on the CPU otherwise (gloo), and does what the
job asks of a program:

* its checkpoints go to ``TRAINIUM_JOB_RUN_DIR``, and a start resumes from the newest one there
  (after a deleted pod, a restart or a redeploy);
* on SIGTERM (a stop, the spend ceiling) every rank finishes its step, rank 0 writes a checkpoint,
  and it exits 143;
* at the end of its schedule it writes ``<run dir>/COMPLETE``, so the job is not run again;
* rank 0 prints one line per step (``kubectl logs`` of the job's pod 0).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STOP_EXIT_CODE = 143


def device() -> tuple[torch.device, str]:
    """Trainium through torch-xla when installed (the Neuron image), else the CPU."""
    try:
        import torch_xla  # noqa: F401 - the Neuron image's

        return torch_xla.device(), "xla"  # type: ignore[attr-defined]
    except ImportError:
        return torch.device("cpu"), "gloo"


def newest(run_dir: Path) -> Path | None:
    found = sorted(run_dir.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


def save(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A whole checkpoint or none: written beside, renamed into place."""
    path = run_dir / f"checkpoint-{step}.pt"
    partial = path.with_suffix(".partial")
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, partial)
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint_every", type=int, default=20)
    args = parser.parse_args(argv)
    run_dir = Path(os.environ["TRAINIUM_JOB_RUN_DIR"])
    run_dir.mkdir(parents=True, exist_ok=True)
    where, backend = device()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    stop = torch.zeros(1)
    signal.signal(signal.SIGTERM, lambda *_: stop.fill_(1))

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1).to(where))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    found = newest(run_dir)
    if found is not None:
        state = torch.load(found, map_location="cpu")
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from {found.name} (step {start})", flush=True)
    weights = torch.arange(1.0, 9.0)
    for step in range(start + 1, args.steps + 1):
        generator = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(64, 8, generator=generator)
        y = (x @ weights).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(model(x.to(where)), y.to(where))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(
                json.dumps(
                    {
                        "step": step,
                        "loss": round(float(loss), 4),
                        "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
                    }
                ),
                flush=True,
            )
        agreed = stop.clone()
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)  # every rank stops after the same step
        if rank == 0 and (step % args.checkpoint_every == 0 or step == args.steps or agreed.item()):
            save(run_dir, step, model.module, optimizer)
        if agreed.item():
            dist.barrier()
            print(f"rank {rank}: stopped by SIGTERM after step {step}", flush=True)
            return STOP_EXIT_CODE
    if rank == 0:
        (run_dir / "COMPLETE").write_text(json.dumps({"step": args.steps}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
