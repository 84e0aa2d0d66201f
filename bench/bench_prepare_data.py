"""Benchmark of training.dataprep.prepare_data (and training.dataprep.vocab) on a real public-domain corpus.

    python -m bench.bench_prepare_data [--workers 1 2] [--dupe_factor 5]
    python -m bench.bench_prepare_data --reference PATH/create_pretraining_data.py [--seeds 1 2 3]
    python -m bench.bench_prepare_data --scaling [--repeat 5]

With ``--scaling`` it prints only how 2 workers compare with 1 on the 21 MB corpus and on the
same corpus written 2 and 4 times over (42 and 84 MB; ``--copies`` picks the multiples): the two
commands run in turn (1, 2, 1, 2, ...), wall and CPU time of each whole process, the speed-up
(1-worker wall / 2-worker wall, pair by pair, median), whether both made the same bytes, and
the "one-core time" of the 2-worker runs (2 x wall - CPU: the time only one core was busy, i.e.
serial start-up, phase ends and exit, if nothing else ran). On an idle 2-core machine the issue's
target is a speed-up of at least 1.8; the probe lines say how many cores were free.

With ``--reference`` (the reference tool: NVIDIA DeepLearningExamples'
``PyTorch/LanguageModeling/BERT/create_pretraining_data.py`` with its ``tokenization.py`` beside
it, run from its folder; it is not part of this project) it prints instead the sample statistics
of both tools on two corpora of different kinds (mean over --seeds, the difference in percent
and the seed-to-seed spread), then the speed of both on the 21 MB corpus: instances/s, the ratio
to the reference, and 2 workers against 1. The second corpus is technical prose: the
reStructuredText sources of the Python 3.11 manuals (``apt-get install python3.11-doc``), one
document per section.

Corpus (about 21 MB of English, all marked "Public Domain" in their SWORD module files), from
Debian packages read with SWORD's ``diatheke`` tool; install them once with

    apt-get install diatheke sword-comm-tdavid sword-comm-scofield sword-text-web sword-text-kjv

* ``sword-comm-tdavid``: C. H. Spurgeon, *The Treasury of David* (1869-1885), 7 volumes of prose;
* ``sword-comm-scofield``: the Scofield Reference Notes (1917 edition);
* ``sword-text-web``: the World English Bible (public-domain modern English);
* ``sword-text-kjv``: the King James Version.

A document is one chapter (one psalm for the Treasury). The sentence splitter is deliberately
simple: a line break after ``.``, ``!`` or ``?`` (and any closing quote or bracket) that follows
a lower-case letter, quote or bracket, when whitespace and a capital letter (or an opening quote)
come next; "Ver. 2." stays whole, abbreviations such as "Mr. Smith" are split. The converted
corpus is cached under ``--cache_dir``.

What is measured, each configuration in a fresh ``python -m training.dataprep.prepare_data`` process
(so start-up, imports and the spawn of workers are included):
* wall time (best of --repeat runs, all listed: the machine may be shared), samples (sequences)
  per second, input MB per second (MB = 10^6 bytes), and CPU time (user + system, from
  getrusage(RUSAGE_CHILDREN), workers included), which other load disturbs less;
* peak memory: the largest sum of resident set sizes (VmRSS) over the process tree, sampled
  from /proc every 0.1 s, and the largest single-process high-water mark (VmHWM) seen;
* the vocabulary build (``training.dataprep.vocab``) on the same corpus;
* tokenization alone: the ``tokenizers`` batch encoder used here, against transformers'
  pure-Python ``BertTokenizerLegacy`` (the same algorithm as the reference tool's tokenizer);
* how many cores were actually free, before and after (the machine may be shared): CPU-bound
  busy loops, one per CPU, timed alone and together.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from training.dataprep.bert_samples import PrepConfig
from training.dataprep.synthetic import prepare_data_command

REPO = Path(__file__).resolve().parents[1]

# SWORD module -> (Debian package, diatheke key range, whether entries span several lines).
# The Bible modules' plain output repeats psalm headings between later verses (a diatheke
# quirk), so only the verse lines themselves are kept there.
MODULES = {
    "TDavid": ("sword-comm-tdavid", "Psalms 1:1-Psalms 150:6", True),
    "Scofield": ("sword-comm-scofield", "Genesis 1:1-Revelation 22:21", True),
    "engWEB2015eb": ("sword-text-web", "Genesis 1:1-Revelation 22:21", False),
    "engKJV2006eb": ("sword-text-kjv", "Genesis 1:1-Revelation 22:21", False),
}
VERSE = re.compile(r"^\s*((?:(?:I{1,3}|[1-3]) )?[A-Z][a-z]+(?: (?:of )?[A-Z][a-z]+)*) (\d+):(\d+): ?(.*)$")
SENTENCE_END = re.compile(r"([a-z)\]\"'”’][.!?][\"'”’)\]]*)\s+(?=[\"'“‘(\[]?[A-Z])")


#: Seed of every timed run: training.dataprep.prepare_data's own default (--seed).
DEFAULT_SEED = PrepConfig().seed


def fail(message: str) -> NoReturn:
    sys.exit(f"bench_prepare_data: {message}")


def export_module(module: str, keys: str) -> str:
    result = subprocess.run(
        ["diatheke", "-b", module, "-f", "plain", "-k", keys], capture_output=True, text=True
    )
    if result.returncode != 0 or len(result.stdout) < 1_000_000:
        fail(f"diatheke could not read module {module}: {result.stderr.strip()[:200]}")
    return result.stdout


def to_documents(plain: str, multiline: bool) -> list[list[str]]:
    """diatheke plain output -> documents (chapters) of sentences."""
    chapters: dict[tuple[str, str], list[str]] = {}
    current: list[str] | None = None
    for line in plain.splitlines():
        match = VERSE.match(line)
        if match:
            current = chapters.setdefault((match[1], match[2]), [])
            current.append(match[4])
        elif multiline and current is not None and not re.fullmatch(r"\(\w+\)", line.strip()):
            current.append(line)
    documents = []
    for lines in chapters.values():
        text = re.sub(r"\s+", " ", " ".join(lines).replace("*", " ")).strip()
        sentences = [s.strip() for s in SENTENCE_END.sub("\\1\n", text).split("\n") if s.strip()]
        if sentences:
            documents.append(sentences)
    return documents


# Second kind of text: technical prose, the reStructuredText sources of the Python 3.11 manuals
# (Debian package python3.11-doc). A document is one section (text between two headings).
PYDOC_SOURCES = Path("/usr/share/doc/python3.11/html/_sources")
HEADING_LINE = re.compile(r"^([=\-~^*#\"'`+])\1{3,}\s*$")
ROLE = re.compile(r":[\w:.-]+:`(?:[^`<]*<)?([^`>]*)>?`")


def pydoc_documents(text: str) -> list[list[str]]:
    """reST source -> sections of sentences: prose paragraphs only (no code, directives, tables)."""
    documents: list[list[str]] = []
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.split("\n")
        if any(HEADING_LINE.match(line) for line in lines):
            if len(sentences) > 1:
                documents.append(sentences)
            sentences = []
            continue
        first = lines[0]
        if not first.strip() or first[0].isspace() or first.startswith((".. ", ">>>", "|", "+", "::")):
            continue
        prose = " ".join(line.strip() for line in lines)
        prose = ROLE.sub(r"\1", prose).replace("``", "").replace("**", "").replace("*", "")
        prose = re.sub(r"`([^`<]*?)\s*(?:<[^>]*>)?`_*", r"\1", prose).rstrip(":")
        prose = re.sub(r"\s+", " ", prose).strip()
        if len(prose.split()) >= 4:
            sentences.extend(s.strip() for s in SENTENCE_END.sub("\\1\n", prose).split("\n") if s.strip())
    if len(sentences) > 1:
        documents.append(sentences)
    return documents


def ensure_pydoc_corpus(cache: Path) -> Path:
    corpus = cache / "pydoc.txt"
    if corpus.exists():
        return corpus
    if not PYDOC_SOURCES.is_dir():
        fail("needs the Python manuals' sources: apt-get install python3.11-doc")
    cache.mkdir(parents=True, exist_ok=True)
    parts: list[str] = []
    for source in sorted(PYDOC_SOURCES.rglob("*.rst.txt")):
        parts.extend("\n".join(doc) + "\n" for doc in pydoc_documents(source.read_text(encoding="utf-8")))
    partial = corpus.with_suffix(".partial")
    partial.write_text("\n".join(parts), encoding="utf-8")
    partial.replace(corpus)
    return corpus


# For the statistics: the Treasury's Psalm 119 alone is one 323,000-token document, and whether
# it draws a short target moves either tool's instance count by about 5% from seed to seed; the
# statistics corpus leaves the Treasury out so that a few seeds measure the distribution.
STATISTICS_MODULES = ("Scofield", "engWEB2015eb", "engKJV2006eb")


def ensure_corpus(cache: Path, modules: tuple[str, ...] = tuple(MODULES), name: str = "corpus.txt") -> Path:
    corpus = cache / name
    if corpus.exists():
        return corpus
    if shutil.which("diatheke") is None:
        fail(
            "needs the diatheke tool and SWORD modules: apt-get install "
            + " ".join(["diatheke"] + [package for package, _, _ in MODULES.values()])
        )
    cache.mkdir(parents=True, exist_ok=True)
    parts: list[str] = []
    for module in modules:
        package, keys, multiline = MODULES[module]
        documents = to_documents(export_module(module, keys), multiline)
        print(f"  {module} ({package}): {len(documents)} documents", file=sys.stderr)
        parts.extend("\n".join(doc) + "\n" for doc in documents)
    partial = corpus.with_suffix(".partial")
    partial.write_text("\n".join(parts), encoding="utf-8")
    partial.replace(corpus)
    return corpus


class TreeMemory:
    """Samples the memory of a process and its descendants from /proc until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_total_kib, self.peak_single_kib = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        return tree

    @staticmethod
    def _status_kib(pid: int, field: str) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            pids = self._tree()
            self.peak_total_kib = max(self.peak_total_kib, sum(self._status_kib(p, "VmRSS") for p in pids))
            self.peak_single_kib = max([self.peak_single_kib] + [self._status_kib(p, "VmHWM") for p in pids])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Run:
    seconds: float  # wall clock
    cpu_seconds: float  # user + system of the process and every worker it waited for
    stdout: str
    memory: TreeMemory


def timed_run(command: list[str], cwd: Path = REPO) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = TreeMemory(process.pid)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    memory.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        fail(f"{' '.join(command)} failed:\n{stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(seconds, cpu, stdout, memory)


def samples_written(stdout: str) -> int:
    """The sample count from prepare_data's last line ("wrote N samples to ...")."""
    match = re.search(r"wrote (\d+) samples", stdout)
    if match is None:
        fail(f"prepare_data printed no 'wrote N samples' line: {stdout[-300:]!r}")
    return int(match[1])


def tokenizer_comparison(corpus: Path, vocab: Path, sample_bytes: int) -> list[str]:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    from training.dataprep.vocab import bert_tokenizer, read_vocab

    text = corpus.read_bytes()[:sample_bytes].decode("utf-8", errors="ignore")
    lines = [line for line in text.splitlines() if line.strip()]
    size_mb = sum(len(line.encode()) for line in lines) / 1e6
    rows = []
    fast = bert_tokenizer(read_vocab(vocab))
    for threads in ("false", "true"):
        os.environ["TOKENIZERS_PARALLELISM"] = threads
        started = time.perf_counter()
        tokens = sum(len(e.ids) for e in fast.encode_batch_fast(lines, add_special_tokens=False))
        seconds = time.perf_counter() - started
        label = "1 thread" if threads == "false" else f"{os.cpu_count()} threads"
        rows.append(
            f"| tokenizers `encode_batch_fast` ({label}) | {size_mb / seconds:.2f} | {tokens / seconds:,.0f} |"
        )
    slow = BertTokenizerLegacy(str(vocab), do_lower_case=True)
    started = time.perf_counter()
    slow_tokens = sum(len(slow.tokenize(line)) for line in lines)
    seconds = time.perf_counter() - started
    rows.append(
        f"| pure-Python WordPiece (`BertTokenizerLegacy`, 1 thread) | {size_mb / seconds:.2f} "
        f"| {slow_tokens / seconds:,.0f} |"
    )
    if slow_tokens != tokens:
        rows.append(f"| (token counts differ: {slow_tokens} vs {tokens}) | | |")
    return rows


# ---------------------------------------------------------------------------------------------
# Against the reference tool (NVIDIA DeepLearningExamples' create_pretraining_data.py, run from
# its own folder with its tokenization.py; not part of this project)

STATISTICS = (
    ("instances per MB", "instances_per_mb"),
    ("mean masked per instance", "mean_masked"),
    ("max masked per instance", "max_masked"),
    ("NSP random share", "nsp_random"),
    ("fill (tokens / max_seq_len)", "fill"),
    ("share of instances <= 64 tokens", "short_share"),
    ("masked shown as [MASK]", "as_mask"),
    ("masked left unchanged", "unchanged"),
    ("masked replaced by another token", "replaced"),
)


def shard_statistics(paths: list[Path], input_bytes: int, mask_id: int) -> dict[str, float]:
    """The sample-distribution figures of a set of shards (either tool's: the format is shared)."""
    import h5py
    import numpy as np

    count = nsp = short = real_tokens = width = as_mask = unchanged = replaced = 0
    masked_total, masked_max = 0, 0
    for path in paths:
        with h5py.File(path, "r") as handle:
            ids, positions = handle["input_ids"][:], handle["masked_lm_positions"][:]
            labels, lengths = handle["masked_lm_ids"][:], handle["input_mask"][:].sum(1)
            nsp += int(handle["next_sentence_labels"][:].sum())
        masked = (positions != 0).sum(1)
        count, width = count + len(ids), ids.shape[1]
        masked_total, masked_max = masked_total + int(masked.sum()), max(masked_max, int(masked.max()))
        short += int((lengths <= 64).sum())
        real_tokens += int(lengths.sum())
        rows, slots = np.nonzero(positions)
        shown, original = ids[rows, positions[rows, slots]], labels[rows, slots]
        as_mask += int((shown == mask_id).sum())
        unchanged += int(((shown != mask_id) & (shown == original)).sum())
        replaced += int(((shown != mask_id) & (shown != original)).sum())
    return {
        "instances": count,
        "instances_per_mb": count / (input_bytes / 1e6),
        "mean_masked": masked_total / count,
        "max_masked": masked_max,
        "nsp_random": nsp / count,
        "fill": real_tokens / (count * width),
        "short_share": short / count,
        "as_mask": as_mask / masked_total,
        "unchanged": unchanged / masked_total,
        "replaced": replaced / masked_total,
    }


def reference_command(
    reference: Path, corpus: Path, vocab: Path, out: Path, dupe: int, seed: int
) -> list[str]:
    return [
        sys.executable,
        str(reference),
        "--vocab_file",
        str(vocab),
        "--input_file",
        str(corpus),
        "--output_file",
        str(out),
        "--dupe_factor",
        str(dupe),
        "--random_seed",
        str(seed),
    ]


def ours_command(corpus: Path, vocab: Path, out: Path, dupe: int, seed: int, workers: int) -> list[str]:
    return prepare_data_command(
        input=corpus,
        vocab=vocab,
        output_dir=out,
        dupe_factor=dupe,
        seed=seed,
        num_workers=workers,
        overwrite=True,
        no_progress=True,
    )


def compare_tokenizers(corpus: Path, vocab: Path) -> None:
    """The data tool's WordPiece (flash-tokenizer for most lines) against ``tokenizers``' on
    every line of the corpus."""
    from training.dataprep.vocab import WordPieceEncoder

    encoder = WordPieceEncoder(vocab)
    lines = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    ours = encoder.encode(lines)
    reference = [e.ids for e in encoder.reference.encode_batch_fast(lines, add_special_tokens=False)]
    differ = sum(a != b for a, b in zip(ours, reference, strict=True))
    print(
        f"tokenization, {corpus.name}: {differ} of {len(lines):,} lines differ from tokenizers' BertWordPiece"
    )


def compare_statistics(
    reference: Path, corpus: Path, vocab: Path, work: Path, dupe: int, seeds: list[int]
) -> None:
    """Both tools on the same corpus and vocab, once per seed; prints the mean of each figure,
    our difference in percent, and the seed-to-seed spread of each mean."""
    import numpy as np

    mask_id = vocab.read_text(encoding="utf-8").splitlines().index("[MASK]")
    size = corpus.stat().st_size
    rows: dict[str, list[dict[str, float]]] = {"reference": [], "ours": []}
    for seed in seeds:
        ref_out = work / f"reference-{seed}.hdf5"
        subprocess.run(
            reference_command(reference, corpus, vocab, ref_out, dupe, seed),
            check=True,
            cwd=reference.parent,
            capture_output=True,
        )
        rows["reference"].append(shard_statistics([ref_out], size, mask_id))
        ref_out.unlink()
        our_out = work / f"ours-{seed}"
        timed_run(ours_command(corpus, vocab, our_out, dupe, seed, workers=1))
        rows["ours"].append(shard_statistics(sorted(our_out.glob("*.hdf5")), size, mask_id))
        shutil.rmtree(our_out)
    print(
        f"\n{corpus.name} ({size / 1e6:.1f} MB), dupe factor {dupe}, seeds {' '.join(map(str, seeds))}, "
        f"{np.mean([r['instances'] for r in rows['reference']]):,.0f} reference instances per seed:\n"
    )
    print(
        "| statistic | reference | ours | ours vs reference | seed spread, std of the mean: reference / ours |"
    )
    print("|---|---|---|---|---|")

    def spread(values: np.ndarray) -> str:
        return (
            f"{100 * values.std(ddof=1) / np.sqrt(len(values)) / values.mean():.2f}%"
            if len(values) > 1
            else "-"
        )

    for label, key in STATISTICS:
        ref = np.array([r[key] for r in rows["reference"]])
        ours = np.array([r[key] for r in rows["ours"]])
        print(
            f"| {label} | {ref.mean():.4f} | {ours.mean():.4f} | {100 * (ours.mean() / ref.mean() - 1):+.2f}% "
            f"| {spread(ref)} / {spread(ours)} |"
        )


def compare_speed(reference: Path, corpus: Path, vocab: Path, work: Path, dupe: int, repeat: int) -> None:
    """Instances per second of the reference (1 process) and ours with 1 and 2 workers, the
    three run in turn ``repeat`` times (so drifts of a shared machine hit all alike)."""
    import numpy as np

    runs: dict[str, list[tuple[float, float, int]]] = {
        "reference": [],
        "ours, 1 worker": [],
        "ours, 2 workers": [],
    }
    for _ in range(repeat):
        ref_out = work / "reference.hdf5"
        run = timed_run(
            reference_command(reference, corpus, vocab, ref_out, dupe, DEFAULT_SEED), cwd=reference.parent
        )
        import h5py

        with h5py.File(ref_out, "r") as handle:
            instances = len(handle["next_sentence_labels"])
        ref_out.unlink()
        runs["reference"].append((run.seconds, run.cpu_seconds, instances))
        for workers in (1, 2):
            out = work / f"ours-{workers}"
            run = timed_run(ours_command(corpus, vocab, out, dupe, DEFAULT_SEED, workers))
            instances = samples_written(run.stdout)
            runs[f"ours, {workers} worker{'s' if workers > 1 else ''}"].append(
                (run.seconds, run.cpu_seconds, instances)
            )
            shutil.rmtree(out)
    print(
        f"\nspeed on {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB), dupe factor {dupe}, "
        f"median of {repeat} runs taken in turn:\n"
    )
    print(
        "| tool | wall s (all runs) | CPU s | instances | instances/s | vs reference | vs 1 worker "
        "| instances per CPU-s | vs reference, per CPU-s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rates = {name: float(np.median([n / wall for wall, _, n in values])) for name, values in runs.items()}
    per_cpu = {name: float(np.median([n / cpu for _, cpu, n in values])) for name, values in runs.items()}
    for name, values in runs.items():
        walls = [wall for wall, _, _ in values]
        print(
            f"| {name} | {np.median(walls):.1f} ({', '.join(f'{w:.1f}' for w in walls)}) "
            f"| {np.median([cpu for _, cpu, _ in values]):.1f} | {values[0][2]:,} | {rates[name]:,.0f} "
            f"| {rates[name] / rates['reference']:.2f}x | {rates[name] / rates['ours, 1 worker']:.2f}x "
            f"| {per_cpu[name]:,.0f} | {per_cpu[name] / per_cpu['reference']:.2f}x |"
        )


def free_cores(processes: int) -> float:
    """How many cores ``processes`` busy loops actually get together: each would finish in the
    solo time on an idle core, so solo x processes / concurrent wall time estimates it."""
    loop = [sys.executable, "-c", "x = 0\nfor i in range(20_000_000): x += i"]
    started = time.perf_counter()
    subprocess.run(loop, check=True)
    solo = time.perf_counter() - started
    started = time.perf_counter()
    for process in [subprocess.Popen(loop) for _ in range(processes)]:
        process.wait()
    return solo * processes / (time.perf_counter() - started)


def vocab_command(corpus: Path, vocab: Path, vocab_size: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "training.dataprep.vocab",
        "--input",
        str(corpus),
        "--output",
        str(vocab),
        "--vocab_size",
        str(vocab_size),
        "--no_progress",
    ]


def ensure_vocab(corpus: Path, vocab: Path, vocab_size: int) -> Path:
    """The corpus's vocab, built once: builds are not bit-identical, and the shards depend on it."""
    if not vocab.exists():
        timed_run(vocab_command(corpus, vocab, vocab_size))
    return vocab


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return (
        f"{os.cpu_count()} CPUs ({model}), {memory_kib / 2**20:.1f} GiB RAM, "
        f"Python {platform.python_version()}, load average before the run {load}"
    )


def repeated(corpus: Path, copies: int) -> Path:
    """The corpus written ``copies`` times over, cached beside it (the corpus itself for 1)."""
    if copies == 1:
        return corpus
    path = corpus.with_name(f"{corpus.stem}-x{copies}{corpus.suffix}")
    if not path.exists() or path.stat().st_size != copies * corpus.stat().st_size:
        text = corpus.read_bytes()
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(text * copies)
        partial.replace(path)
    return path


def scaling(corpus: Path, vocab: Path, work: Path, dupe: int, repeat: int) -> None:
    """2 workers against 1, whole processes in turn; see the module docstring (``--scaling``)."""
    import statistics

    runs: dict[int, list[Run]] = {1: [], 2: []}
    manifests: dict[int, set[bytes]] = {1: set(), 2: set()}
    for _ in range(repeat):
        for workers in (1, 2):
            out = work / f"scaling-{workers}"
            run = timed_run(ours_command(corpus, vocab, out, dupe, DEFAULT_SEED, workers))
            runs[workers].append(run)
            manifests[workers].add((out / "manifest.json").read_bytes())
            shutil.rmtree(out)
    pairs = [one.seconds / two.seconds for one, two in zip(runs[1], runs[2], strict=True)]
    print(
        f"\n2 workers vs 1 on {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB), dupe factor {dupe}, "
        f"{repeat} runs each in turn, medians:\n"
    )
    print("| workers | wall s (all runs) | CPU s | one-core time s (2 x wall - CPU) |\n|---|---|---|---|")
    for workers, values in runs.items():
        walls = [r.seconds for r in values]
        one_core = (
            f"{statistics.median(2 * r.seconds - r.cpu_seconds for r in values):.2f}" if workers == 2 else "-"
        )
        print(
            f"| {workers} | {statistics.median(walls):.2f} ({', '.join(f'{w:.2f}' for w in walls)}) "
            f"| {statistics.median(r.cpu_seconds for r in values):.2f} | {one_core} |"
        )
    same = len(manifests[1] | manifests[2]) == 1
    print(
        f"\nspeed-up, 1-worker wall / 2-worker wall, pair by pair: median {statistics.median(pairs):.2f}x "
        f"(min {min(pairs):.2f}, max {max(pairs):.2f}); target on an idle 2-core machine: 1.8x"
    )
    print(f"same shard set (manifest with SHA-256 of each shard) from every run: {'yes' if same else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache_dir", type=Path, default=REPO / "bench" / ".cache" / "prepare_data")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--tokenizer_sample_mb", type=float, default=2.0)
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per worker count (the machine may be shared)"
    )
    parser.add_argument(
        "--reference",
        type=Path,
        help="path of the reference create_pretraining_data.py (NVIDIA DeepLearningExamples, with its "
        "tokenization.py beside it): compare sample statistics and speed with it instead",
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds of the statistics runs"
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="only 2 workers against 1 on the 21 MB corpus and its --copies (--repeat runs each, in turn)",
    )
    parser.add_argument(
        "--copies",
        type=int,
        nargs="+",
        default=[1, 2, 4],
        help="with --scaling: the corpus written this many times over, one measurement each "
        "(1 = 20.9 MB, 2 = 41.8 MB, 4 = 83.7 MB)",
    )
    args = parser.parse_args()
    if args.scaling:
        measure_scaling(args)
    elif args.reference is not None:
        compare_with_reference(args)
    else:
        measure_speed(args)


def measure_scaling(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    print(f"free cores now (probe with {os.cpu_count()} busy loops): {free_cores(os.cpu_count() or 1):.2f}")
    corpus = ensure_corpus(args.cache_dir)
    vocab = ensure_vocab(corpus, args.cache_dir / "vocab.txt", args.vocab_size)
    for copies in args.copies:
        scaling(repeated(corpus, copies), vocab, args.cache_dir, args.dupe_factor, args.repeat)
    print(f"free cores after the runs (probe): {free_cores(os.cpu_count() or 1):.2f}")


def measure_speed(args: argparse.Namespace) -> None:
    """The default mode: the vocab build, prepare_data per worker count, and tokenization alone."""
    print(f"machine: {machine()}")
    print(f"free cores now (probe with {os.cpu_count()} busy loops): {free_cores(os.cpu_count() or 1):.2f}")
    corpus = ensure_corpus(args.cache_dir)
    corpus_mb = corpus.stat().st_size / 1e6
    print(f"corpus: {corpus} ({corpus_mb:.1f} MB)")

    vocab = args.cache_dir / "vocab.txt"
    run = timed_run(vocab_command(corpus, vocab, args.vocab_size))
    tokens = len(vocab.read_text(encoding="utf-8").splitlines())
    print(
        f"vocab: {tokens} tokens in {run.seconds:.1f} s wall, {run.cpu_seconds:.1f} s CPU "
        f"({corpus_mb / run.seconds:.1f} MB/s), peak RSS {run.memory.peak_total_kib / 1024:.0f} MiB"
    )

    print(f"\nprepare_data, dupe_factor {args.dupe_factor}, best wall time of {args.repeat} runs per row:\n")
    print(
        "| workers | wall s (all runs) | CPU s | samples | samples/s | input MB/s "
        "| peak RSS, tree sum (MiB) | peak RSS, largest process (MiB) |\n|---|---|---|---|---|---|---|---|"
    )
    for workers in args.workers:
        out = args.cache_dir / f"shards-{workers}"
        command = ours_command(corpus, vocab, out, args.dupe_factor, DEFAULT_SEED, workers)
        runs = [timed_run(command) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r.seconds)
        samples = samples_written(best.stdout)
        print(
            f"| {workers} | {best.seconds:.1f} ({', '.join(f'{r.seconds:.1f}' for r in runs)}) "
            f"| {best.cpu_seconds:.1f} | "
            f"{samples} | {samples / best.seconds:,.0f} | {corpus_mb / best.seconds:.2f} | "
            f"{best.memory.peak_total_kib / 1024:.0f} | {best.memory.peak_single_kib / 1024:.0f} |"
        )
        shutil.rmtree(out)
    print(f"load average after the runs: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"free cores after the runs (probe): {free_cores(os.cpu_count() or 1):.2f}")

    print(f"\ntokenization only, first {args.tokenizer_sample_mb:g} MB of the corpus:\n")
    print("| tokenizer | MB/s | tokens/s |\n|---|---|---|")
    for row in tokenizer_comparison(corpus, vocab, int(args.tokenizer_sample_mb * 1e6)):
        print(row)


def compare_with_reference(args: argparse.Namespace) -> None:
    if not args.reference.is_file():
        fail(f"--reference {args.reference}: no such file; give the path of create_pretraining_data.py")
    print(f"machine: {machine()}")
    print(f"free cores now (probe with {os.cpu_count()} busy loops): {free_cores(os.cpu_count() or 1):.2f}")
    corpora = [
        ensure_corpus(args.cache_dir, STATISTICS_MODULES, "bible.txt"),
        ensure_pydoc_corpus(args.cache_dir),
    ]
    work = args.cache_dir / "versus-reference"
    work.mkdir(parents=True, exist_ok=True)
    for corpus in corpora:
        # builds are not bit-identical: keep one per corpus
        vocab = ensure_vocab(corpus, args.cache_dir / f"{corpus.stem}-vocab.txt", args.vocab_size)
        compare_tokenizers(corpus, vocab)
        compare_statistics(args.reference, corpus, vocab, work, args.dupe_factor, args.seeds)
    speed_corpus = ensure_corpus(args.cache_dir)
    speed_vocab = ensure_vocab(speed_corpus, args.cache_dir / "vocab.txt", args.vocab_size)
    compare_tokenizers(speed_corpus, speed_vocab)
    compare_speed(args.reference, speed_corpus, speed_vocab, work, args.dupe_factor, args.repeat)
    print(f"free cores after the runs (probe): {free_cores(os.cpu_count() or 1):.2f}")


if __name__ == "__main__":
    main()
