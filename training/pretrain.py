"""BERT phase-1 pretraining: ``python -m training.pretrain`` (one process per device; torchrun).

Reads rank/world from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK). Resumes by
itself from the newest verified checkpoint in ``--output_dir``, so a torchrun or Volcano
restart continues where the job stopped. See ``--help`` for the flags; the reference
script's names and defaults are kept.

Exit codes: 0 done (``--steps_this_run`` or ``--max_steps`` reached); 2 a bad input, found by
pre-flight before the first step or by a check later (one line on stderr; ``--debug`` shows the
traceback); 143 stopped by SIGTERM after writing a checkpoint (``training.stop``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training import checkpoint as ckpt
from training.cli import parse_args
from training.data import DataPosition, ShardFormatError, ShardStream, make_loader, position_from_tensor
from training.device import Backend, make_backend, resolve_log_every, resolve_precision, select_device
from training.metrics import RunStats, StepLogger, mfu, model_flops_per_seq, summary
from training.model import PretrainingModule, build_model, count_parameters
from training.optim import MasterWeights, apply_hyperparameters
from training.preflight import PreflightError, preflight
from training.resume import ResumeError, check_flags, check_resumed_loss, saved_flags
from training.step import make_step_state, optimizer_step
from training.stop import STOP_EXIT_CODE, GracefulStop, Stopped
from trainium_job.launch import launch_env

log = logging.getLogger("training.pretrain")


def warn_if_restarts_will_fail() -> None:
    """torchrun's shared rendezvous store breaks restarts; see ``launch.launch_env``."""
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    if shared and restarts > 0:
        log.warning(
            "torchrun shares one rendezvous store across restart rounds; a restart after a "
            "failure will not form a process group. Start torchrun with %s",
            " ".join(f"{k}={v}" for k, v in launch_env(None).items()),  # type: ignore[arg-type]
        )


def seed_host(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def model_state(module: PretrainingModule, master: MasterWeights | None) -> dict[str, torch.Tensor]:
    """The HF model's state dict; with master weights, their fp32 values replace the bf16 ones."""
    state = module.hf_model.state_dict(keep_vars=True)
    masters = {id(p): m for p, m in master.pairs} if master else {}
    return {k: masters.get(id(v), v).detach() for k, v in state.items()}


def load_model_state(module: PretrainingModule, master: MasterWeights | None, state: dict) -> None:
    module.hf_model.load_state_dict(state)
    if master:
        by_id = {id(v): k for k, v in module.hf_model.state_dict(keep_vars=True).items()}
        master.load_from_model_state(state, [by_id[id(p)] for p, _ in master.pairs])


def param_digest(module: PretrainingModule) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.hf_model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class StepReporter:
    """Rank 0's per-step bookkeeping, run when the step's values are on the host."""

    def __init__(
        self, logger: StepLogger, global_batch: int, flops_per_seq: float, peak: float | None, world_size: int
    ) -> None:
        self.logger = logger
        self.global_batch = global_batch
        self.flops_per_seq = flops_per_seq
        self.peak = peak
        self.world_size = world_size
        self.stats = RunStats()
        self.last = time.perf_counter()
        # (checkpoint, its recorded loss) until the first step after resuming is checked.
        self.resumed: tuple[Path, float | None] | None = None
        self.last_step = 0

    def __call__(self, step: int, lr: float, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        # Throughput over the steps since the last report (--log_every may skip some).
        now = time.perf_counter()
        seq_per_s = self.global_batch * (step - self.last_step) / max(now - self.last, 1e-9)
        self.last, self.last_step = now, step
        loss_v = float(loss.item())
        if self.resumed is not None:  # the one extra check after a resume; the value is on the host
            path, recorded = self.resumed
            self.resumed = None
            check_resumed_loss(loss_v, recorded, path, step)
        self.stats.add(step, seq_per_s, loss_v)
        self.logger.log(
            step,
            {
                "loss": loss_v,
                "lr": lr,
                "grad_norm": float(grad_norm.item()),
                "seq_per_s": seq_per_s,
                "mfu": mfu(seq_per_s, self.flops_per_seq, self.peak, self.world_size),
            },
        )


def train(args: argparse.Namespace) -> dict[str, Any] | None:
    """Run (or resume) training; raises ``Stopped`` after a SIGTERM's checkpoint."""
    stop = GracefulStop()  # first: a SIGTERM during set-up stops at the first step boundary
    try:
        return _train(args, stop)
    finally:
        stop.close()


def _train(args: argparse.Namespace, stop: GracefulStop) -> dict[str, Any] | None:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    ready = preflight(args, rank, world)  # before the device, the process group and the model
    if rank == 0:
        for line in ready.applied:
            log.info("%s", line)
    files = ready.files
    device = select_device(args.device)
    precision = resolve_precision(device, args.precision, args.fp32_master_weights)
    backend: Backend = make_backend(device, local_rank, rank, world)
    backend.configure_precision(precision, args.fp32_master_weights)
    backend.init_distributed()
    stop.attach(world)
    output = Path(args.output_dir)
    if rank == 0:
        warn_if_restarts_will_fail()

    # Same seed on every rank -> same initial weights; per-rank streams are seeded below.
    seed_host(args.seed)
    module = build_model(
        args.model, vocab_size=args.vocab_size, mlm_head=args.mlm_head, attn=backend.attn_implementation
    )
    config = module.hf_model.config
    module = backend.prepare_model(module, precision)
    step_state = make_step_state(
        backend,
        module,
        precision=precision,
        optimizer=args.optimizer,
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps,
        max_steps=args.max_steps,
        grad_accum=args.grad_accum_usteps,
        max_grad_norm=args.max_grad_norm,
        fp32_master_weights=args.fp32_master_weights,
    )
    master, optimizer, scheduler = step_state.master, step_state.optimizer, step_state.scheduler

    root = ckpt.checkpoint_root(output)
    step, position = 0, DataPosition()
    loaded = ckpt.load_first_usable(ready.candidates, rank, world)
    if loaded is not None:
        start_from = loaded.path
        if loaded.path != ready.candidates[0]:  # fell back past the one pre-flight checked
            check_flags(loaded.meta, args, len(files), loaded.path)
        load_model_state(module, master, loaded.state["model"])
        optimizer.load_state_dict(loaded.state["optimizer"])
        scheduler.load_state_dict(loaded.state["scheduler"])
        # This run's --lr, --weight_decay and schedule, not the checkpoint's (training.resume).
        apply_hyperparameters(optimizer, scheduler, lr=args.lr, weight_decay=args.weight_decay)
        step = loaded.step
        if loaded.rank_state is not None:
            position = DataPosition(*loaded.rank_state["data_position"])
            backend.set_rng_state(ckpt.restore_rng_state(loaded.rank_state["rng"]))
        else:
            position = DataPosition(epoch=int(loaded.state.get("data_epoch", 0)) + 1)
            seed_host(args.seed + 1000 * rank + step)
            backend.seed(args.seed + 1000 * rank + step)
        if rank == 0:
            log.info("resumed from %s at step %d, data position %s", start_from, step, position)
    else:
        seed_host(args.seed + rank)  # different dropout masks per rank
        backend.seed(args.seed + rank)

    end_step = min(args.max_steps, step + args.steps_this_run)
    global_batch = args.batch_size * args.grad_accum_usteps * world
    flops_per_seq = model_flops_per_seq(config.num_hidden_layers, config.hidden_size, args.seq_len)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else backend.peak_flops()
    if rank == 0:
        log.info(
            "device %s, precision %s%s, world %d, global batch %d, model %s (%.1fM params), "
            "steps %d -> %d of %d",
            device,
            precision,
            " + fp32 master" if master else "",
            world,
            global_batch,
            args.model,
            count_parameters(module) / 1e6,
            step,
            end_step,
            args.max_steps,
        )

    stream = ShardStream(
        files,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        max_pred_len=args.max_pred_len,
        rank=rank,
        world_size=world,
        seed=args.seed,
        start=position,
        vocab_size=config.vocab_size,
    )
    loader = make_loader(stream, num_workers=args.num_workers, pin_memory=device == "cuda")
    batches = backend.batches(loader)
    step_state.model = backend.wrap_model(module)
    step_state.model.train()

    writes = rank == 0 and not args.precompile
    # Resumed: TensorBoard hides the events a previous attempt wrote from this step on.
    logger = StepLogger(
        writes,
        Path(args.step_log),
        args.tensorboard_dir,
        restart,
        purge_step=step + 1 if loaded is not None else None,
    )
    reporter = StepReporter(logger, global_batch, flops_per_seq, peak, world)
    if loaded is not None:
        reporter.resumed = (loaded.path, loaded.meta.get("loss"))
    last_position: torch.Tensor | None = None

    def save(at_step: int, *, stopping: bool = False) -> None:
        backend.synchronize()  # everything materialised before rank 0 copies it to the host
        pos = position_from_tensor(last_position) if last_position is not None else position
        ckpt.save_checkpoint(
            root,
            at_step,
            ckpt.Comm(rank, world, backend.barrier),
            rank_state={"data_position": pos.as_list(), "rng": ckpt.capture_rng_state(backend.rng_state())},
            global_state=lambda: {
                "model": model_state(module, master),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": at_step,
                "data_epoch": pos.epoch,
                "model_config": config.to_dict(),
                "args": vars(args),
            },
            keep=args.keep_checkpoints,
            meta=lambda: {
                "args": saved_flags(args),
                "num_shards": len(files),
                "loss": reporter.stats.losses[-1] if reporter.stats.losses else None,
            },
            verify_and_prune=not stopping,  # inside the grace period: the next save prunes
        )
        if rank == 0:
            log.info("checkpoint step %d written", at_step)

    start_step = step
    t0 = time.perf_counter()
    reporter.last, reporter.last_step = t0, step
    log_every = resolve_log_every(device, args.log_every)
    stopped = False
    while step < end_step:
        logs = rank == 0 and ((step + 1) % log_every == 0 or step + 1 == end_step)
        report = (lambda r, s=step + 1: reporter(s, r.lr, r.loss, r.grad_norm)) if logs else None
        last_position = optimizer_step(step_state, batches, report).position
        step += 1
        saved = not args.precompile and (step % args.checkpoint_every == 0 or step == end_step)
        if saved:
            save(step)  # every N steps and at the end of this run
        if step < end_step and stop.agreed():  # every rank, after the same step
            if not saved and not args.precompile:
                save(step, stopping=True)
            stopped = True
            break
    backend.synchronize()
    wall = time.perf_counter() - t0
    logger.close()
    if stopped:
        backend.barrier()
        del batches, loader
        backend.shutdown()
        raise Stopped(
            f"stopped by SIGTERM after step {step}; checkpoint {ckpt.step_dir_name(step)} "
            f"holds it; exiting {STOP_EXIT_CODE} so the job restarts and resumes"
        )

    if args.param_digest and not args.precompile:
        digest_dir = output / "param_digest"
        digest_dir.mkdir(parents=True, exist_ok=True)
        (digest_dir / f"rank_{rank:05d}.txt").write_text(param_digest(module) + "\n")
    result = None
    if writes:
        result = summary(
            reporter.stats,
            start_step=start_step,
            end_step=step,
            wall_s=wall,
            global_batch=global_batch,
            flops_per_seq=flops_per_seq,
            peak_per_device=peak,
            world_size=world,
            extra={
                "device": device,
                "precision": precision,
                "model": args.model,
                "optimizer": args.optimizer,
                "restart": restart,
                "max_steps": args.max_steps,
            },
        )
        metrics_file = Path(args.metrics_file)
        if step == start_step and metrics_file.exists():
            # A restart of a finished run: keep the summary of the run that did the work.
            log.info("nothing to do at step %d of %d; %s kept", step, args.max_steps, metrics_file)
        else:
            metrics_file.parent.mkdir(parents=True, exist_ok=True)
            ckpt.write_json_durably(metrics_file, result)
        log.info("done: %s", json.dumps(result))
    backend.barrier()
    del batches, loader
    backend.shutdown()
    return result


def one_line(e: BaseException) -> str:
    """The last line of an error's message (a DataLoader worker's error carries its traceback)."""
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    last = lines[-1].strip() if lines else type(e).__name__
    prefix = f"{type(e).__module__}.{type(e).__name__}: "
    return last[len(prefix) :] if last.startswith(prefix) else last


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s",
    )
    try:
        train(args)
    except Stopped as e:
        log.warning("%s", e)
        return STOP_EXIT_CODE
    except (PreflightError, ckpt.CheckpointError, ResumeError, ShardFormatError) as e:
        if args.debug:
            raise
        print(f"error [rank {rank}]: {one_line(e)}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
