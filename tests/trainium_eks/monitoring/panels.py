"""Plot the dashboard's training panels from a local Prometheus's answers about a real CPU run.

    python -m tests.trainium_eks.monitoring.panels docs/img/training-panels.png

Each subplot is one panel of the dashboard's "Run" row, its query evaluated over the run by the
local Prometheus of :mod:`.local_prometheus` (Debian's, ``make prometheus``): the picture in
docs/monitoring.md shows what the panels show, not a drawing of them.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from tests.training.conftest import child_env, make_held_out
from tests.trainium_eks.monitoring.local_prometheus import ScrapedRun, scraped_training_run
from tests.trainium_eks.monitoring.promtool import GRAFANA_VARIABLES
from training.dataprep.synthetic import SMALL_SET_FLAGS, make_shards
from trainium_eks.monitoring.dashboard import RUN_PANELS

#: Grafana's unit ids, as the plot titles say them.
_UNITS = {"short": "", "percentunit": " (0-1)", "s": " (s)"}
#: Optimizer steps the picture's run shows (about half a minute on two cores).
PICTURE_STEPS = 250


def plot_panels(run: ScrapedRun, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = -(-len(RUN_PANELS) // 3)
    fig, axes = plt.subplots(rows, 3, figsize=(15, 3.75 * rows), constrained_layout=True)
    shown, spare = list(axes.flat)[: len(RUN_PANELS)], list(axes.flat)[len(RUN_PANELS) :]
    for ax in spare:
        ax.set_visible(False)
    for ax, panel in zip(shown, RUN_PANELS, strict=True):
        for expr, legend in panel.queries:
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            for series in run.prometheus.query_range(expr, run.start, run.end):
                times = [t - run.start for t, _ in series["values"]]
                ax.plot(
                    times,
                    [float(v) for _, v in series["values"]],
                    label=legend.replace("{{training_job}} ", ""),
                )
        ax.set_title(panel.title + _UNITS.get(panel.unit, f" ({panel.unit})"))
        ax.set_xlabel("seconds into the run")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    when = datetime.fromtimestamp(run.start, tz=timezone.utc).strftime("%Y-%m-%d")
    fig.suptitle(f"Training panels, tiny BERT on CPU, scraped by Prometheus every second ({when})")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", type=Path)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shards = make_shards(
            root / "shards", n_docs=60, flags={**SMALL_SET_FLAGS, "num_shards": 6}, env=child_env()
        )
        held_out = make_held_out(root / "held_out", shards.vocab)
        with scraped_training_run(root, shards, held_out, steps=PICTURE_STEPS) as run:
            print(plot_panels(run, args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
