"""Benchmark of training.prepare_data (and training.vocab) on a real public-domain corpus.

    python bench/bench_prepare_data.py [--workers 1 2] [--dupe_factor 5]

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

What is measured, each configuration in a fresh ``python -m training.prepare_data`` process
(so start-up, imports and the spawn of workers are included):
* wall time (best of --repeat runs, all listed: the machine may be shared), samples (sequences)
  per second, input MB per second (MB = 10^6 bytes), and CPU time (user + system, from
  getrusage(RUSAGE_CHILDREN), workers included), which other load disturbs less;
* peak memory: the largest sum of resident set sizes (VmRSS) over the process tree, sampled
  from /proc every 0.1 s, and the largest single-process high-water mark (VmHWM) seen;
* the vocabulary build (``training.vocab``) on the same corpus;
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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


def fail(message: str) -> None:
    sys.exit(f"bench_prepare_data: {message}")


def export_module(module: str, keys: str) -> str:
    result = subprocess.run(["diatheke", "-b", module, "-f", "plain", "-k", keys], capture_output=True, text=True)
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


def ensure_corpus(cache: Path) -> Path:
    corpus = cache / "corpus.txt"
    if corpus.exists():
        return corpus
    if shutil.which("diatheke") is None:
        fail("needs the diatheke tool and SWORD modules: apt-get install " + " ".join(
            ["diatheke"] + [package for package, _, _ in MODULES.values()]))  # fmt: skip
    cache.mkdir(parents=True, exist_ok=True)
    parts = []
    for module, (package, keys, multiline) in MODULES.items():
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


def timed_run(command: list[str]) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = TreeMemory(process.pid)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    memory.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        fail(f"{' '.join(command)} failed:\n{stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(seconds, cpu, stdout, memory)


def tokenizer_comparison(corpus: Path, vocab: Path, sample_bytes: int) -> list[str]:
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    from training.vocab import bert_tokenizer, read_vocab

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
        rows.append(f"| tokenizers `encode_batch_fast` ({label}) | {size_mb / seconds:.2f} | {tokens / seconds:,.0f} |")
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


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return (
        f"{os.cpu_count()} CPUs ({model}), {memory_kib / 2**20:.1f} GiB RAM, "
        f"Python {platform.python_version()}, load average before the run {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache_dir", type=Path, default=REPO / "bench" / ".cache" / "prepare_data")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--tokenizer_sample_mb", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per worker count (the machine may be shared)")
    args = parser.parse_args()

    print(f"machine: {machine()}")
    print(f"free cores now (probe with {os.cpu_count()} busy loops): {free_cores(os.cpu_count() or 1):.2f}")
    corpus = ensure_corpus(args.cache_dir)
    corpus_mb = corpus.stat().st_size / 1e6
    print(f"corpus: {corpus} ({corpus_mb:.1f} MB)")

    vocab = args.cache_dir / "vocab.txt"
    run = timed_run([sys.executable, "-m", "training.vocab", "--input", str(corpus),
                     "--output", str(vocab), "--vocab_size", str(args.vocab_size), "--no_progress"])  # fmt: skip
    tokens = len(vocab.read_text(encoding="utf-8").splitlines())
    print(f"vocab: {tokens} tokens in {run.seconds:.1f} s wall, {run.cpu_seconds:.1f} s CPU "
          f"({corpus_mb / run.seconds:.1f} MB/s), peak RSS {run.memory.peak_total_kib / 1024:.0f} MiB")  # fmt: skip

    print(f"\nprepare_data, dupe_factor {args.dupe_factor}, best wall time of {args.repeat} runs per row:\n")
    print(
        "| workers | wall s (all runs) | CPU s | samples | samples/s | input MB/s "
        "| peak RSS, tree sum (MiB) | peak RSS, largest process (MiB) |\n|---|---|---|---|---|---|---|---|"
    )
    for workers in args.workers:
        out = args.cache_dir / f"shards-{workers}"
        command = [sys.executable, "-m", "training.prepare_data", "--input", str(corpus), "--vocab", str(vocab),
                   "--output_dir", str(out), "--dupe_factor", str(args.dupe_factor), "--num_workers", str(workers),
                   "--overwrite", "--no_progress"]  # fmt: skip
        runs = [timed_run(command) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r.seconds)
        samples = int(re.search(r"wrote (\d+) samples", best.stdout)[1])
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


if __name__ == "__main__":
    main()
