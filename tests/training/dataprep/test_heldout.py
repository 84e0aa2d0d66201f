"""The held-out set's data step (training.dataprep.heldout): PG-19's books as the data tool's input,
the Britannica left out, the shards' casing, and the set the trainer evaluates on.

The source is a small Parquet file built here with the PG-19 loader's columns
(huggingface/datasets ``datasets/pg19/pg19.py`` at 9c2a18db: ``short_book_title`` string,
``publication_date`` int32, ``url`` string, ``text`` string), served by a local HTTP server for the
end-to-end run, which is the command the staging Job's pod runs (``heldout_run``) under the dataset
pods' program.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support import served_folder
from tests.training.conftest import child_env, tiny_args
from training.dataprep.heldout import (
    CORPUS_NAME,
    EXCLUDED_TITLE,
    book_lines,
    make_set,
    parquet_books,
    sentences,
    shards_lower_case,
    write_corpus,
)
from training.dataprep.shard_format import read_manifest, write_manifest
from training.dataprep.synthetic import gutenberg_books, pg19_parquet
from training.dataprep.synthetic import write_corpus as synthetic_corpus
from training.dataprep.text_input import UsageError
from training.trainer.pretrain import parse_args, train
from trainium_eks.jobs.heldout_staging import heldout_paths, heldout_run
from trainium_job.dataset_runner import JOB_NAME_ENV
from trainium_job.paths import JobPaths
from trainium_job.waits import Wait

REPO = Path(__file__).resolve().parents[3]
#: A book as PG-19 keeps it: Gutenberg's line wrapping, paragraphs apart by a blank line.
TALE = """CHAPTER I.

It was a dark night. Mr. Smith said, "Hello!" and
went away. J. S. Mill wrote it in 1859.

"Is it so?" she asked.  The end came (at last.) Then 3 men left.

* * *
"""
#: The Encyclopaedia Britannica, as PG-19's metadata names its slices.
BRITANNICA = "Encyclopaedia Britannica 11th Edition Volume 7 Slice 1 by Various"


def test_given_a_wrapped_paragraph_then_one_sentence_per_item_titles_and_initials_kept():
    assert book_lines(TALE) == [
        "CHAPTER I.",
        "It was a dark night.",
        'Mr. Smith said, "Hello!" and went away.',
        "J. S. Mill wrote it in 1859.",
        '"Is it so?" she asked.',
        "The end came (at last.)",
        "Then 3 men left.",
    ]
    assert sentences("no end here") == ["no end here"]


def test_given_pg19_books_when_converted_then_the_data_tool_input_without_the_britannica(tmp_path):
    # Given three books in PG-19's columns, one of them a slice of the Britannica
    source = pg19_parquet(
        tmp_path / "test.parquet",
        [("The Tale by A. Writer", TALE), (BRITANNICA, "Abacus. A frame. " * 50), ("Empty", "\n\n* * *\n")],
    )
    # When its books are turned into the data tool's input
    out = io.StringIO()
    summary = write_corpus(parquet_books(source), out)
    # Then one sentence per line, a blank line between books, the Britannica and the empty book out
    assert out.getvalue() == "\n".join(book_lines(TALE)) + "\n"
    assert (summary.books, summary.excluded, summary.sentences) == (3, (BRITANNICA,), 7)
    assert summary.bytes == len(out.getvalue().encode())
    # And the rule names every Britannica title of PG-19's metadata, and nothing else
    assert EXCLUDED_TITLE.search("Encyclopaedia Britannica 11th Ed. Vol. 3 Pt. 1 Slice 2 by Various")
    assert not EXCLUDED_TITLE.search("The Story of the Britannia by E. P. Statham")


def test_given_two_books_then_a_blank_line_between_them_only():
    out = io.StringIO()
    write_corpus([("A", "One. Two."), ("B", "Three.")], out)
    assert out.getvalue() == "One.\nTwo.\n\nThree.\n"


def test_given_a_parquet_without_the_text_column_then_refused_naming_it(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"short_book_title": ["x"], "content": ["y"]}), path)
    with pytest.raises(UsageError, match=r"no column text \(it has content, short_book_title\)"):
        list(parquet_books(path))
    (tmp_path / "html").write_text("<html>Not Found</html>")
    with pytest.raises(UsageError, match="not a Parquet file"):
        list(parquet_books(tmp_path / "html"))


def test_given_shards_when_their_casing_is_asked_then_the_manifest_wins_else_the_vocabulary(shards, tmp_path):
    # A set the data tool made records it (the test shards: lower-cased)
    assert shards_lower_case(shards.dir, shards.vocab) == (True, f"the manifest of {shards.dir}")
    # The public shards' manifest (staging's) records none: their vocabulary says it
    staged = tmp_path / "staged"
    staged.mkdir()
    for f in shards.files:
        (staged / f.name).symlink_to(f)
    manifest = read_manifest(shards.dir)
    write_manifest(staged, type(manifest)(manifest.shards, 128, 20, None, {"source": "s3://b/k.tar"}))
    assert shards_lower_case(staged, shards.vocab)[0] is True
    cased = tmp_path / "cased.txt"
    cased.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nThe\n")
    assert shards_lower_case(staged, cased) == (False, f"{cased} has upper-case tokens ('The')")


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """20 synthetic books (another corpus seed than the training shards'), plus a Britannica slice."""
    root = tmp_path_factory.mktemp("books")
    texts = gutenberg_books(synthetic_corpus(root / "corpus.txt", n_docs=20, seed=42))
    return [(f"Book {i} by Someone", t) for i, t in enumerate(texts)] + [(BRITANNICA, texts[0])]


def test_given_too_few_samples_for_one_pass_then_more_passes_recorded_and_britannica_listed(
    shards, books, tmp_path
):
    # Given: how many samples one pass over the books gives
    once = make_set(
        books,
        data_dir=shards.dir,
        vocab=shards.vocab,
        output_dir=tmp_path / "once",
        work_dir=tmp_path / "work-once",
        max_seq_len=128,
        max_pred_len=20,
        samples=1,
    )
    assert once.dupe_factor == 1 and once.lower_case
    # When more are asked for than one pass gives
    made = make_set(
        books,
        data_dir=shards.dir,
        vocab=shards.vocab,
        output_dir=tmp_path / "twice",
        work_dir=tmp_path / "work-twice",
        max_seq_len=128,
        max_pred_len=20,
        samples=once.samples + 1,
        record={"source": "https://example.org/x.parquet"},
    )
    # Then the set is made again with as many passes as needed, and its manifest says so
    settings = read_manifest(tmp_path / "twice").settings
    assert made.dupe_factor == 2 and made.samples > once.samples
    assert settings["dupe_factor"] == 2 and settings["lower_case"] is True
    assert settings["excluded"] == [BRITANNICA] and settings["source"] == "https://example.org/x.parquet"
    assert settings["inputs"] == [{"file": CORPUS_NAME, "bytes": made.corpus.bytes}]
    # And more than ten passes can give is refused, naming the flag
    with pytest.raises(UsageError, match=r"--samples 100000000: the source gives \d+ samples"):
        make_set(
            books[:2],
            data_dir=shards.dir,
            vocab=shards.vocab,
            output_dir=tmp_path / "never",
            work_dir=tmp_path / "work-never",
            max_seq_len=128,
            max_pred_len=20,
            samples=100_000_000,
        )


@pytest.fixture()
def web(tmp_path) -> Iterator[str]:
    """http://127.0.0.1:<port>/ serving ``tmp_path/web`` (the pinned URL's stand-in)."""
    with served_folder(tmp_path / "web") as url:
        yield url


def test_given_staged_shards_when_the_jobs_command_runs_then_a_set_the_trainer_evaluates_on(
    shards, books, web, tmp_path
):
    # Given: the phase's shards staged (their marker), and the books at the source's URL
    fsx = tmp_path / "data"
    data_dir = fsx / "datasets" / "wiki"
    data_dir.parent.mkdir(parents=True)
    data_dir.symlink_to(shards.dir)
    marker = tmp_path / "wiki.staged"
    marker.write_text("6 shards\n")
    pg19_parquet(tmp_path / "web" / "test.parquet", books)
    paths = JobPaths(data_dir=str(data_dir), dataset_marker=str(marker), cache_dir="c", output_dir="o")
    wait = Wait(what="phase 1's shards", ready=str(marker), deadline_s=60, poll_s=1)
    # When the pod's program runs the command the construct renders (the trainer reads 8 samples)
    run = heldout_run(
        source=f"{web}test.parquet",
        paths=paths,
        vocab=str(shards.vocab),
        shape=(128, 20),
        samples=8,
        waits=[wait],
    )
    env = child_env(**{JOB_NAME_ENV: "heldout-0a1b2c3d"})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "trainium_job.dataset_runner", run.dumps()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Then the set is published with its manifest and marker, and nothing else is left on FSx
    assert done.returncode == 0, done.stderr[-3000:]
    held = heldout_paths(paths)
    assert Path(held.dataset_marker).read_text().endswith(" samples\n")
    manifest = read_manifest(held.data_dir)
    assert (manifest.seq_len, manifest.max_pred_len) == (128, 20)
    assert (
        manifest.settings["source"] == f"{web}test.parquet" and len(manifest.settings["source_sha256"]) == 64
    )
    assert manifest.settings["excluded"] == [BRITANNICA]
    assert sorted(p.name for p in (fsx / "datasets").iterdir()) == ["wiki", "wiki-heldout"]
    assert "from 20 of 21 books" in done.stdout and "lower-cased: the manifest of" in done.stdout
    # And the trainer evaluates on it (pre-flight accepts it as --eval_dir)
    out = tmp_path / "run"
    args = tiny_args(shards, out, "--max_steps", "2", "--eval_dir", held.data_dir, "--eval_samples", "8")
    result = train(parse_args(args))
    assert result["eval"]["step"] == 2 and result["eval"]["samples"] == 8
    # And a second run finds the marker and does nothing
    again = subprocess.run(
        [sys.executable, "-m", "trainium_job.dataset_runner", run.dumps()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and "held-out set already staged" in again.stdout


def test_given_a_source_that_is_not_there_then_the_job_gives_up_with_its_reason(shards, web, tmp_path):
    marker = tmp_path / "wiki.staged"
    marker.write_text("6 shards\n")
    paths = JobPaths(data_dir=str(shards.dir), dataset_marker=str(marker), cache_dir="c", output_dir="o")
    run = heldout_run(
        source=f"{web}missing.parquet", paths=paths, vocab=str(shards.vocab), shape=(128, 20), samples=8
    )
    run = type(run)(
        command=run.command, failed=str(tmp_path / "held.staging-failed"), attempts=1, backoff_s=1
    )
    env = child_env(**{JOB_NAME_ENV: "heldout-0a1b2c3d"})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "trainium_job.dataset_runner", run.dumps()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    failed = json.loads((tmp_path / "held.staging-failed").read_text())
    assert done.returncode != 0
    assert failed["by"] == "heldout-0a1b2c3d" and "HTTP Error 404" in failed["reason"]
    assert not Path(heldout_paths(paths).data_dir).exists()
