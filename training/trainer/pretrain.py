"""BERT pretraining: ``python -m training.trainer.pretrain`` (one process per device; torchrun).

Reads rank/world from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK). Resumes by
itself from the newest verified checkpoint in ``--output_dir``, so a torchrun or Volcano
restart continues where the job stopped; with none there, ``--init_from`` gives the first
weights (phase 2 from phase 1: ``training.trainer.init_from``). See ``--help`` for the flags;
the reference script's names and defaults are kept.

Exit codes: 0 done (``--steps_this_run`` or ``--max_steps`` reached); 2 a bad input, found by
pre-flight before the first step or by a check later (one line on stderr; ``--debug`` shows the
traceback); 143 stopped by SIGTERM after writing a checkpoint (``training.trainer.stop``); 86 an
optimizer step waited past the watchdog's bound (``training.trainer.watchdog``, ``trainium_job.hang``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import BertConfig

from trainium_job.launch import launch_env
from trainium_job.paths import COMPLETE_MARKER, staging_failed

from ..dataprep.shard_format import ShardSetError
from . import checkpoint as ckpt
from . import restart_totals
from .cli import PretrainArgs, parse_args
from .data import (
    DataPosition,
    ShardFormatError,
    ShardStream,
    make_loader,
    position_from_tensor,
)
from .device import Backend, make_backend, resolve_log_every, resolve_precision, select_device
from .evaluate import EvalResult, Evaluator, eval_batches
from .init_from import InitFromError, StartPoint, start_weights
from .metrics import RunStats, StepLogger, mfu, model_flops_per_seq, summary
from .model import PretrainingModule, build_model, count_parameters
from .optim import apply_hyperparameters
from .preflight import PreflightError, held_out, preflight
from .prom_metrics import TrainingMetrics, start_metrics
from .resume import ResumeError, check_flags, check_resumed_loss
from .step import StepState, make_step_state, optimizer_step
from .stop import STOP_EXIT_CODE, GracefulStop, Stopped
from .train_state import load_model_state, recorded_run, restore_state, save_state
from .watchdog import HangBound, StepWatchdog, exit_hung
from .worker_exit import run_worker

log = logging.getLogger("training.trainer.pretrain")


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


def param_digest(module: PretrainingModule) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.hf_model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class StepReporter:
    """Rank 0's per-step bookkeeping, run when the step's values are on the host."""

    def __init__(
        self,
        logger: StepLogger,
        global_batch: int,
        flops_per_seq: float,
        peak: float | None,
        world_size: int,
        metrics: TrainingMetrics | None = None,
    ) -> None:
        self.logger = logger
        self.metrics = metrics
        self.global_batch = global_batch
        self.flops_per_seq = flops_per_seq
        self.peak = peak
        self.world_size = world_size
        self.stats = RunStats()
        self.last = time.perf_counter()
        # (checkpoint, its recorded loss) until the first step after resuming is checked.
        self.resumed: tuple[Path, float | None] | None = None
        self.last_step = 0
        self.last_eval: EvalResult | None = None

    def evaluated(self, result: EvalResult) -> None:
        """A held-out evaluation's result, on the host: the step log, TensorBoard, Prometheus."""
        self.last_eval = result
        self.logger.log(result.step, result.values(), group="eval")
        if self.metrics is not None:
            self.metrics.evaluated(
                step=result.step,
                mlm_loss=result.mlm_loss,
                mlm_accuracy=result.mlm_accuracy,
                nsp_accuracy=result.nsp_accuracy,
            )

    @property
    def last_loss(self) -> float | None:
        """The loss of the last step reported (rank 0's; None before the first)."""
        return self.stats.losses[-1] if self.stats.losses else None

    def __call__(self, step: int, lr: float, scalars: torch.Tensor) -> None:
        """``scalars``: the step's ``[loss, grad_norm]`` (``StepResult.scalars``), read at once."""
        # Throughput over the steps since the last report (--log_every may skip some).
        now = time.perf_counter()
        step_s = max(now - self.last, 1e-9) / max(step - self.last_step, 1)
        seq_per_s = self.global_batch * (step - self.last_step) / max(now - self.last, 1e-9)
        self.last, self.last_step = now, step
        loss_v, grad_norm_v = (float(v) for v in scalars.tolist())  # one host transfer for both
        if self.resumed is not None:  # the one extra check after a resume; the value is on the host
            path, recorded = self.resumed
            self.resumed = None
            check_resumed_loss(loss_v, recorded, path, step)
        self.stats.add(step, seq_per_s, loss_v)
        mfu_v = mfu(seq_per_s, self.flops_per_seq, self.peak, self.world_size)
        self.logger.log(
            step, {"loss": loss_v, "lr": lr, "grad_norm": grad_norm_v, "seq_per_s": seq_per_s, "mfu": mfu_v}
        )
        if self.metrics is not None:
            self.metrics.report(
                loss=loss_v, lr=lr, grad_norm=grad_norm_v, seq_per_s=seq_per_s, step_s=step_s, mfu=mfu_v
            )


@dataclass
class Run:
    """One rank's run: ``set_up`` makes it, ``resume`` and ``loop`` move it on, ``finish`` ends it."""

    args: PretrainArgs
    rank: int
    world: int
    restart: int  # torchrun's restart round
    files: list[str]  # the shards, sorted
    candidates: list[Path]  # checkpoints to resume from, best first (pre-flight verified the first)
    device: str
    precision: str
    state: StepState
    config: BertConfig
    peak: float | None  # the device's peak FLOP/s for MFU, when known
    #: The last optimizer step done, and where this rank's data stream starts.
    step: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    loaded: ckpt.Loaded | None = None  # the checkpoint resumed from
    #: The last step's data position, still on the device: read when a checkpoint is written.
    last_position: torch.Tensor | None = None
    #: This node's Prometheus metrics (LOCAL_RANK 0 with --metrics_port), else None.
    metrics: TrainingMetrics | None = None
    #: The step watchdog of the loop (None outside it, and in a precompile trial).
    watchdog: StepWatchdog | None = None
    #: ``--init_from``'s checkpoint, verified by pre-flight (None when resuming or starting fresh).
    start: StartPoint | None = None
    #: Where this run's first weights came from (``StartPoint.source``), kept in every checkpoint.
    init_from: dict[str, Any] | None = None
    #: The SHA-256 of the shards' vocab.txt, recorded in every checkpoint (None when unknown).
    vocab_sha256: str | None = None
    #: The held-out evaluation (``--eval_dir``), None without one (or while it is not there).
    evaluator: Evaluator | None = None
    #: ``--eval_dir`` while it is not there yet: looked for at each evaluation (``arrived_held_out``).
    eval_pending: str | None = None

    @property
    def backend(self) -> Backend:
        return self.state.backend

    @property
    def global_batch(self) -> int:
        return self.args.optim.batch_size * self.args.optim.grad_accum_usteps * self.world

    @property
    def flops_per_seq(self) -> float:
        return model_flops_per_seq(
            self.config.num_hidden_layers, self.config.hidden_size, self.args.data.seq_len
        )

    @property
    def writes(self) -> bool:
        """Whether this rank writes the step log, TensorBoard and metrics (rank 0, not precompiling)."""
        return self.rank == 0 and not self.args.runtime.precompile


def train(args: PretrainArgs) -> dict[str, Any] | None:
    """Run (or resume) training; raises ``Stopped`` after a SIGTERM's checkpoint."""
    stop = GracefulStop()  # first: a SIGTERM during set-up stops at the first step boundary
    try:
        return _train(args, stop)
    finally:
        stop.close()


def _train(args: PretrainArgs, stop: GracefulStop) -> dict[str, Any] | None:
    run = set_up(args, stop)
    resume(run)
    try:
        return _run(run, stop)
    finally:
        if run.metrics is not None:
            run.metrics.close()


def _run(run: Run, stop: GracefulStop) -> dict[str, Any] | None:
    args = run.args
    run.metrics = serve_metrics(run)
    if run.writes:  # rank 0, not precompiling: this start into the restart ledger, its totals exported
        restart_totals.started(
            Path(args.checkpoint.output_dir),
            checkpoint=run.step if run.loaded is not None else None,
            torchrun_restart=run.restart,
            metrics=run.metrics,
        )
    start_step = run.step
    end_step = min(args.optim.max_steps, start_step + args.optim.steps_this_run)
    if run.rank == 0:
        log_start(run, end_step)
    loader = make_loader(data_stream(run), num_workers=args.data.num_workers, pin_memory=run.device == "cuda")
    batches = run.backend.batches(loader)
    run.state.model = run.backend.wrap_model(run.state.module)
    run.state.model.train()
    reporter = make_reporter(run)
    t0 = time.perf_counter()
    reporter.last, reporter.last_step = t0, start_step
    run.watchdog = start_watchdog(run)
    try:
        stopped = loop(run, batches, reporter, end_step, stop)
    except BaseException:
        reporter.logger.close()  # TensorBoard's events so far: the process ends with no teardown
        raise
    finally:
        if run.watchdog is not None:
            run.watchdog.close()
            run.watchdog = None
    run.backend.synchronize()
    wall = time.perf_counter() - t0
    reporter.logger.close()
    result = None if stopped else finish(run, reporter.stats, start_step, wall, reporter.last_eval)
    run.backend.barrier()
    del batches, loader  # the process groups stay up: training.trainer.worker_exit
    if stopped:
        raise Stopped(
            f"stopped by SIGTERM after step {run.step}; checkpoint {ckpt.step_dir_name(run.step)} "
            f"holds it; exiting {STOP_EXIT_CODE} so the job restarts and resumes"
        )
    return result


def set_up(args: PretrainArgs, stop: GracefulStop) -> Run:
    """Pre-flight, then the device, the process group, the model and its optimizer (nothing loaded)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    ready = preflight(args, rank, world)  # before the device, the process group and the model
    if rank == 0:
        for line in ready.applied:
            log.info("%s", line)
    rt, optim, m = args.runtime, args.optim, args.model
    device = select_device(rt.device)
    precision = resolve_precision(device, rt.precision, optim.fp32_master_weights)
    backend = make_backend(device, int(os.environ.get("LOCAL_RANK", "0")), rank, world)
    backend.configure_precision(precision, optim.fp32_master_weights)
    collective_timeout = timedelta(seconds=args.hang.collective_timeout_s)
    backend.init_distributed(collective_timeout)
    stop.attach(world, collective_timeout)
    if rank == 0:
        warn_if_restarts_will_fail()

    # Same seed on every rank -> same initial weights; ``resume`` seeds the per-rank streams.
    seed_host(rt.seed)
    module = build_model(
        m.model, vocab_size=m.vocab_size, mlm_head=m.mlm_head, attn=backend.attn_implementation
    )
    config = module.hf_model.config
    module = backend.prepare_model(module, precision)
    state = make_step_state(
        backend,
        module,
        precision=precision,
        optimizer=optim.optimizer,
        lr=optim.lr,
        weight_decay=optim.weight_decay,
        warmup_steps=optim.warmup_steps,
        max_steps=optim.max_steps,
        grad_accum=optim.grad_accum_usteps,
        max_grad_norm=optim.max_grad_norm,
        fp32_master_weights=optim.fp32_master_weights,
    )
    return Run(
        args=args,
        rank=rank,
        world=world,
        restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        files=ready.files,
        candidates=ready.candidates,
        device=device,
        precision=precision,
        state=state,
        config=config,
        peak=rt.peak_tflops * 1e12 if rt.peak_tflops else backend.peak_flops(),
        start=ready.start,
        vocab_sha256=ready.vocab_sha256,
        evaluator=make_evaluator(args, ready.eval_files, world, config.vocab_size),
        eval_pending=ready.eval_pending,
    )


def make_evaluator(args: PretrainArgs, files: list[str], world: int, vocab_size: int) -> Evaluator | None:
    if not files:
        return None
    return Evaluator(
        files,
        batch_size=args.optim.batch_size,
        seq_len=args.data.seq_len,
        max_pred_len=args.data.max_pred_len,
        seed=args.runtime.seed,
        vocab_size=vocab_size,
        batches=eval_batches(args.eval.eval_samples, args.optim.batch_size, world),
    )


def resume(run: Run) -> None:
    """Continue from the first checkpoint that loads; without one, seed this rank's streams."""
    seed, rank, backend = run.args.runtime.seed, run.rank, run.backend
    loaded = ckpt.load_first_usable(run.candidates, rank, run.world)
    if loaded is None:
        seed_host(seed + rank)  # different dropout masks per rank
        backend.seed(seed + rank)
        if run.start is not None:
            start_from(run, run.start)
        return
    run.init_from = loaded.meta.get("init_from")  # a run started with --init_from keeps saying so
    if loaded.path != run.candidates[0]:  # fell back past the one pre-flight checked
        check_flags(recorded_run(loaded.meta), run.args.flags(), len(run.files), loaded.path)
    restored = restore_state(loaded, run.state)
    # This run's --lr, --weight_decay and schedule, not the checkpoint's (training.trainer.resume).
    optim = run.args.optim
    apply_hyperparameters(
        run.state.optimizer, run.state.scheduler, lr=optim.lr, weight_decay=optim.weight_decay
    )
    if not restored.rng_restored:  # another world size: fresh streams, other than the last run's
        seed_host(seed + 1000 * rank + restored.step)
        backend.seed(seed + 1000 * rank + restored.step)
    run.step, run.position, run.loaded = restored.step, restored.position, loaded
    if rank == 0:
        log.info("resumed from %s at step %d, data position %s", loaded.path, run.step, run.position)


def start_from(run: Run, start: StartPoint) -> None:
    """The weights of ``--init_from``'s checkpoint; its optimizer, schedule and data state are not read."""
    weights = start_weights(start)
    try:
        load_model_state(run.state.module, run.state.master, weights)
    except RuntimeError as e:  # load_state_dict's missing, unexpected or mis-shaped keys
        raise InitFromError(f"--init_from {start.path}: {' '.join(str(e).split())[:1000]}") from None
    run.init_from = start.source
    if run.rank == 0:
        log.info("weights from %s (step %d of run %s)", start.path, start.meta["step"], run.init_from["run"])


def serve_metrics(run: Run) -> TrainingMetrics | None:
    """This node's metrics endpoint (not in a precompile trial: its values are stubs' outputs)."""
    rt = run.args.runtime
    metrics = start_metrics(
        0 if rt.precompile else rt.metrics_port, local_rank=int(os.environ.get("LOCAL_RANK", "0"))
    )
    if metrics is not None:
        metrics.started(
            step=run.step,
            max_steps=run.args.optim.max_steps,
            checkpoint_every=run.args.checkpoint.checkpoint_every,
            resumed_from=run.step if run.loaded is not None else None,
            labels={
                "model": run.args.model.model,
                "device": run.device,
                "precision": run.precision,
                "optimizer": run.args.optim.optimizer,
                "run": Path(run.args.checkpoint.output_dir).name,
            },
        )
    return metrics


def start_watchdog(run: Run) -> StepWatchdog | None:
    """The loop's step watchdog, started (none in a precompile trial: its steps are compiles)."""
    if run.args.runtime.precompile:
        return None
    h = run.args.hang
    run_dir = Path(run.args.checkpoint.output_dir)
    watchdog = StepWatchdog(
        HangBound(floor_s=h.hang_floor_s, factor=h.hang_factor, warmup_steps=h.hang_warmup_steps),
        rank=run.rank,
        report=run.metrics,
        on_expiry=lambda expiry: exit_hung(expiry, run_dir),  # with its marker for the restart ledger
    )
    watchdog.start(run.step, last_checkpoint=run.step if run.loaded is not None else None)
    return watchdog


def step_progress(watchdog: StepWatchdog | None, step: int) -> Callable[[str], None] | None:
    """What ``optimizer_step`` waits for, told to the watchdog as part of step ``step``."""
    if watchdog is None:
        return None
    return lambda what: watchdog.doing(f"step {step}'s {what}")


def unbounded(run: Run, phase: str) -> AbstractContextManager[None]:
    """A phase the watchdog does not bound (an evaluation, a checkpoint save)."""
    return run.watchdog.paused(phase) if run.watchdog is not None else nullcontext()


def log_start(run: Run, end_step: int) -> None:
    log.info(
        "device %s, precision %s%s, world %d, global batch %d, model %s (%.1fM params), steps %d -> %d of %d",
        run.device,
        run.precision,
        " + fp32 master" if run.state.master else "",
        run.world,
        run.global_batch,
        run.args.model.model,
        count_parameters(run.state.module) / 1e6,
        run.step,
        end_step,
        run.args.optim.max_steps,
    )


def data_stream(run: Run) -> ShardStream:
    """This rank's share of the shards, from where the run continues."""
    data = run.args.data
    return ShardStream(
        run.files,
        batch_size=run.args.optim.batch_size,
        seq_len=data.seq_len,
        max_pred_len=data.max_pred_len,
        rank=run.rank,
        world_size=run.world,
        seed=run.args.runtime.seed,
        start=run.position,
        vocab_size=run.config.vocab_size,
    )


def make_reporter(run: Run) -> StepReporter:
    rt = run.args.runtime
    # Resumed: TensorBoard hides the events a previous attempt wrote from this step on.
    logger = StepLogger(
        run.writes,
        Path(rt.step_log),
        rt.tensorboard_dir,
        run.restart,
        purge_step=run.step + 1 if run.loaded is not None else None,
    )
    reporter = StepReporter(logger, run.global_batch, run.flops_per_seq, run.peak, run.world, run.metrics)
    if run.loaded is not None:
        reporter.resumed = (run.loaded.path, recorded_run(run.loaded.meta).loss)
    return reporter


def loop(
    run: Run,
    batches: Iterator[dict[str, torch.Tensor]],
    reporter: StepReporter,
    end_step: int,
    stop: GracefulStop,
) -> bool:
    """Optimizer steps up to ``end_step``, checkpointing on the way; True when a SIGTERM stopped it."""
    precompile, every = run.args.runtime.precompile, run.args.checkpoint.checkpoint_every
    log_every = resolve_log_every(run.device, run.args.runtime.log_every)
    eval_every = run.args.eval.eval_every
    watchdog = run.watchdog
    while run.step < end_step:
        logs = run.rank == 0 and ((run.step + 1) % log_every == 0 or run.step + 1 == end_step)
        report = (lambda r, s=run.step + 1: reporter(s, r.lr, r.scalars)) if logs else None
        progress = step_progress(watchdog, run.step + 1)
        run.last_position = optimizer_step(run.state, batches, report, progress).position
        run.step += 1
        if watchdog is not None:
            watchdog.stepped(run.step)
        if run.metrics is not None:
            run.metrics.stepped(run.step)
        evaluating = (run.evaluator is not None or run.eval_pending is not None) and (
            run.step == end_step or bool(eval_every and run.step % eval_every == 0)
        )
        # A stop asked for during this step skips its evaluation: the grace period is the
        # checkpoint's (the last step's evaluation still runs: it is the run's result).
        if evaluating and run.step < end_step and stop_agreed(run, stop):
            return stopped_here(run, reporter, saved=False)
        if evaluating:
            # Unbounded: its length follows --eval_samples, not the step's, and on XLA the first
            # evaluation compiles its graphs (precompile builds them too), as warm-up does.
            with unbounded(run, "evaluation"):
                if run.evaluator is None:
                    run.evaluator = arrived_held_out(run, stop, last=run.step == end_step)
                if run.evaluator is not None:
                    evaluate(run, reporter)
        saved = not precompile and (run.step % every == 0 or run.step == end_step)
        if saved:
            with unbounded(run, "checkpoint"):
                save(run, reporter)  # every N steps and at the end of this run
        if run.step < end_step and stop_agreed(run, stop):
            return stopped_here(run, reporter, saved=saved)
    return False


def stop_agreed(run: Run, stop: GracefulStop) -> bool:
    """Whether any rank was asked to stop: a collective of every rank, after the same step."""
    if run.watchdog is not None:
        run.watchdog.doing(f"the stop agreement after step {run.step} (a gloo all-reduce of every rank)")
    return stop.agreed()


def stopped_here(run: Run, reporter: StepReporter, *, saved: bool) -> bool:
    """The stop's checkpoint of this step (unless ``saved`` already, or a precompile trial); True."""
    if not saved and not run.args.runtime.precompile:
        with unbounded(run, "checkpoint"):
            save(run, reporter, stopping=True)
    return True


def evaluate(run: Run, reporter: StepReporter) -> None:
    """The held-out evaluation after step ``run.step`` (every rank; rank 0 reports it)."""
    assert run.evaluator is not None
    report = reporter.evaluated if run.writes else None
    run.evaluator(run.state.module, run.backend, run.precision, run.step, report)


def arrived_held_out(run: Run, stop: GracefulStop, *, last: bool) -> Evaluator | None:
    """The evaluation of the held-out set that was not there at start (``Run.eval_pending``), once
    every rank sees it and it passes pre-flight's checks; None until then, and for the rest of the
    run once refused (a problem of the held-out set does not stop the training). Every rank, at
    the same steps: its two agreements are collectives (``GracefulStop.every_rank``)."""
    path = run.eval_pending
    assert path is not None
    if not stop.every_rank(os.path.isdir(path)):
        if last and run.rank == 0:
            log.warning(
                "no held-out evaluation after step %d: --eval_dir %s is not there%s",
                run.step,
                path,
                staging_gave_up(path),
            )
        return None
    run.eval_pending = None
    try:
        files, problem = held_out(run.args, run.files, run.rank, run.world), None
    except (PreflightError, ShardSetError, OSError) as e:
        files, problem = None, str(e)
    if files is None and problem is None:
        problem = f"--eval_dir {path}: gone again"
    if not stop.every_rank(problem is None):
        if problem is not None:
            log.error("held-out set refused; no evaluation in this run: %s", problem)
        return None
    if run.rank == 0:
        log.info("held-out set %s is there: evaluating from step %d on", path, run.step)
    return make_evaluator(run.args, files or [], run.world, run.config.vocab_size)


def staging_gave_up(path: str) -> str:
    """`` (its staging gave up: <why>)`` when the held-out set's staging Job left its failed marker."""
    try:
        reason = json.loads(Path(staging_failed(path)).read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" (its staging gave up: {reason})"


def save(run: Run, reporter: StepReporter, *, stopping: bool = False) -> None:
    run.backend.synchronize()  # everything materialised before rank 0 copies it to the host
    started = time.perf_counter()
    position = position_from_tensor(run.last_position) if run.last_position is not None else run.position
    save_state(
        ckpt.checkpoint_root(run.args.checkpoint.output_dir),
        run.step,
        run.state,
        position,
        flags=run.args.flags(),
        num_shards=len(run.files),
        loss=reporter.last_loss,
        keep=run.args.checkpoint.keep_checkpoints,
        verify_and_prune=not stopping,  # inside the grace period: the next save prunes
        init_from=run.init_from,
        vocab_sha256=run.vocab_sha256,
    )
    if run.metrics is not None:
        run.metrics.checkpointed(run.step, time.perf_counter() - started)
    if run.watchdog is not None:
        run.watchdog.checkpointed(run.step)
    if run.rank == 0:
        log.info("checkpoint step %d written", run.step)


def finish(
    run: Run, stats: RunStats, start_step: int, wall: float, last_eval: EvalResult | None = None
) -> dict[str, Any] | None:
    """A finished run's outputs: each rank's weight digest (--param_digest), rank 0's metrics
    (with the last held-out evaluation's result)."""
    rt = run.args.runtime
    if rt.param_digest and not rt.precompile:
        digest_dir = Path(run.args.checkpoint.output_dir) / "param_digest"
        digest_dir.mkdir(parents=True, exist_ok=True)
        (digest_dir / f"rank_{run.rank:05d}.txt").write_text(param_digest(run.state.module) + "\n")
    if not run.writes:
        return None
    result = summary(
        stats,
        start_step=start_step,
        end_step=run.step,
        wall_s=wall,
        global_batch=run.global_batch,
        flops_per_seq=run.flops_per_seq,
        peak_per_device=run.peak,
        world_size=run.world,
        extra={
            "device": run.device,
            "precision": run.precision,
            "model": run.args.model.model,
            "optimizer": run.args.optim.optimizer,
            "restart": run.restart,
            "max_steps": run.args.optim.max_steps,
            "init_from": run.init_from,
            "eval": asdict(last_eval) if last_eval is not None else None,
        },
    )
    metrics_file = Path(rt.metrics_file)
    if run.step == start_step and metrics_file.exists():
        # A restart of a finished run: keep the summary of the run that did the work.
        log.info("nothing to do at step %d of %d; %s kept", run.step, run.args.optim.max_steps, metrics_file)
    else:
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_json_durably(metrics_file, result)
    if run.step >= run.args.optim.max_steps:
        mark_complete(run)
    log.info("done: %s", json.dumps(result))
    log.info("%s", restart_totals.summary(Path(run.args.checkpoint.output_dir)))
    return result


def mark_complete(run: Run) -> None:
    """The run reached its ``--max_steps``: ``<output_dir>/COMPLETE`` names its final checkpoint,
    and the job's worker script then skips this run (phase 1 is never trained again before
    phase 2). Written last, durably, after the final checkpoint and the metrics."""
    out = Path(run.args.checkpoint.output_dir)
    final = ckpt.checkpoint_root(out) / ckpt.step_dir_name(run.step)
    record = {"step": run.step, "max_steps": run.args.optim.max_steps, "checkpoint": str(final)}
    ckpt.write_json_durably(out / COMPLETE_MARKER, record)


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
    except (PreflightError, ckpt.CheckpointError, ResumeError, ShardFormatError, InitFromError) as e:
        if args.runtime.debug:
            raise
        print(f"error [rank {rank}]: {one_line(e)}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    run_worker(main)
