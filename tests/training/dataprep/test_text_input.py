"""Bad input to ``python -m training.dataprep.prepare_data``: binaries, archives, other encodings, bad bytes."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from training.dataprep.synthetic import build_vocab, write_corpus
from training.dataprep.text_input import binary_kind, expand_inputs

REPO = Path(__file__).resolve().parents[3]
PROG = "python -m training.dataprep.prepare_data: error: "


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("text")
    text = write_corpus(root / "corpus.txt", n_docs=30, seed=2)
    lines = text.read_text(encoding="utf-8").split("\n")
    lines[7] += " café naïve señor"  # accented words, on line 8
    text.write_text("\n".join(lines), encoding="utf-8")
    return text, build_vocab([text], root / "vocab.txt", vocab_size=300)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "training.dataprep.prepare_data",
            *args,
            "--dupe_factor",
            "1",
            "--num_workers",
            "1",
            "--no_progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PROG), lines
    return lines[0][len(PROG) :]


def _hdf5(path: Path) -> None:
    with h5py.File(path, "w") as handle:
        handle.create_dataset("input_ids", data=np.zeros((4, 128), np.int32))


def _tar(path: Path) -> None:
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("corpus.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))


def _zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("corpus.txt", "hello\n")


MAKERS = {
    "shard.hdf5": (_hdf5, "an HDF5 file"),
    "corpus.txt.gz": (lambda p: p.write_bytes(gzip.compress(b"hello\n")), "a gzip archive"),
    "corpus.zip": (_zip, "a zip archive"),
    "corpus.tar": (_tar, "a tar archive"),
    "corpus.txt.bz2": (lambda p: p.write_bytes(bz2.compress(b"hello\n")), "a bzip2 archive"),
    "corpus.txt.xz": (lambda p: p.write_bytes(lzma.compress(b"hello\n")), "an xz archive"),
    "weights.bin": (
        lambda p: p.write_bytes(b"ab\x00\x01\x02" * 10),
        r"binary data \(a NUL byte at offset 2\)",
    ),
}


@pytest.mark.parametrize("name", MAKERS)
def test_given_a_binary_file_or_archive_then_one_line_names_the_file_and_what_it_is(corpus, tmp_path, name):
    make, kind = MAKERS[name]
    bad = tmp_path / name
    make(bad)
    message = one_line_error(
        run("--input", str(bad), "--vocab", str(corpus[1]), "--output_dir", str(tmp_path / "o"))
    )
    assert re.match(rf"--input {re.escape(str(bad))}: is {kind}, not text; give plain text files", message), (
        message
    )
    assert not (tmp_path / "o").exists()


def test_given_an_archive_to_the_vocab_builder_then_one_line_names_it(tmp_path):
    archive = tmp_path / "corpus.zip"
    _zip(archive)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.dataprep.vocab",
            "--input",
            str(archive),
            "--output",
            str(tmp_path / "vocab.txt"),
            "--no_progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"python -m training.dataprep.vocab: error: --input {archive}: is a zip archive, "
        "not text; give plain text files (one sentence per line, blank line between "
        "documents): unpack archives first, and leave shards out of the corpus "
        "(see --help)"
    ]
    assert not (tmp_path / "vocab.txt").exists()


def test_given_a_folder_of_shards_as_input_then_no_corpus_file_or_with_every_file_the_first_shard_is_named(
    corpus, tmp_path
):
    folder = tmp_path / "shards.hdf5"
    folder.mkdir()
    _hdf5(folder / "a_training_0.hdf5")
    args = ("--input", str(folder), "--vocab", str(corpus[1]), "--output_dir", str(tmp_path / "o"))
    assert one_line_error(run(*args)).startswith(
        f"--input {folder}: directory holds no file matching '*.txt'"
    )
    message = one_line_error(run(*args, "--input_pattern", "*"))
    assert message.startswith(f"--input {folder / 'a_training_0.hdf5'}: is an HDF5 file, not text")


def test_given_a_folder_without_text_files_then_refused_in_one_line_and_nothing_written(corpus, tmp_path):
    # What the issue found: readme.md and data.csv but no text files gave exit 0 and 10 samples.
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "readme.md").write_text(corpus[0].read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    out = tmp_path / "o"
    message = one_line_error(run("--input", str(folder), "--vocab", str(corpus[1]), "--output_dir", str(out)))
    assert message == (
        f"--input {folder}: directory holds no file matching '*.txt'; name the corpus files, or give "
        "--input_pattern (e.g. '*' for every file) (see --help)"
    )
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_given_an_input_pattern_then_only_matching_files_of_a_folder_are_read(corpus, tmp_path):
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "wiki.md").write_text(corpus[0].read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "notes.txt").write_text("not read\n", encoding="utf-8")
    done = run(
        "--input",
        str(folder),
        "--input_pattern",
        "*.md",
        "--vocab",
        str(corpus[1]),
        "--output_dir",
        str(tmp_path / "o"),
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert [entry["file"] for entry in manifest["settings"]["inputs"]] == ["wiki.md"]
    assert manifest["settings"]["input_pattern"] == "*.md"


def test_given_a_nul_byte_deep_in_a_text_file_then_file_line_and_offset_are_named(corpus, tmp_path):
    text = corpus[0].read_bytes()
    cut = text.index(b"\n", 20_000) + 1  # past what the up-front check reads
    bad = tmp_path / "late.txt"
    bad.write_bytes(text[:cut] + b"\x00\x00" + text[cut:])
    line = text[:cut].count(b"\n") + 1
    message = one_line_error(
        run("--input", str(bad), "--vocab", str(corpus[1]), "--output_dir", str(tmp_path / "o"))
    )
    assert message.startswith(f"--input {bad}: binary data (NUL byte) at line {line}, byte offset {cut};")


def test_given_latin1_text_then_strict_utf8_names_file_line_and_offset(corpus, tmp_path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes(corpus[0].read_text(encoding="utf-8").encode("latin-1"))
    offset = latin.read_bytes().index("é".encode("latin-1"))
    message = one_line_error(
        run("--input", str(latin), "--vocab", str(corpus[1]), "--output_dir", str(tmp_path / "o"))
    )
    assert message.startswith(f"--input {latin}: invalid utf-8 at line 8, byte offset {offset} (b'\\xe9');")
    assert "give --encoding if the file uses another one (e.g. latin-1), or --errors replace" in message


def shard_digests(directory: Path) -> list[str]:
    return [s["sha256"] for s in json.loads((directory / "manifest.json").read_text())["shards"]]


def test_given_latin1_text_with_its_encoding_then_the_shards_equal_the_utf8_ones(corpus, tmp_path):
    text, vocab = corpus
    latin = tmp_path / "latin1.txt"
    latin.write_bytes(text.read_text(encoding="utf-8").encode("latin-1"))
    utf8 = run("--input", str(text), "--vocab", str(vocab), "--output_dir", str(tmp_path / "utf8"))
    decoded = run(
        "--input",
        str(latin),
        "--vocab",
        str(vocab),
        "--output_dir",
        str(tmp_path / "latin"),
        "--encoding",
        "latin-1",
    )
    replaced = run(
        "--input",
        str(latin),
        "--vocab",
        str(vocab),
        "--output_dir",
        str(tmp_path / "replaced"),
        "--errors",
        "replace",
    )
    assert utf8.returncode == decoded.returncode == replaced.returncode == 0, (
        decoded.stderr,
        replaced.stderr,
    )
    assert shard_digests(tmp_path / "latin") == shard_digests(tmp_path / "utf8")  # no accent lost
    assert shard_digests(tmp_path / "replaced") != shard_digests(tmp_path / "utf8")  # U+FFFD instead


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--encoding", "klingon"], r"--encoding klingon: unknown encoding; e\.g\. utf-8, latin-1"),
        (["--encoding", "utf-16"], r"--encoding utf-16: not ASCII-compatible .*convert the corpus to UTF-8"),
        (["--errors", "ignore"], r"argument --errors: invalid choice: 'ignore'"),
        (
            ["--output_dir", "/sys/shards"],
            r"--output_dir /sys/shards: cannot write in /sys \(.+\); choose a directory",
        ),
    ],
)
def test_given_a_bad_encoding_option_or_unwritable_output_then_one_line(corpus, tmp_path, args, expected):
    base = {"--input": str(corpus[0]), "--vocab": str(corpus[1]), "--output_dir": str(tmp_path / "o")}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    message = one_line_error(run(*[item for pair in base.items() for item in pair]))
    assert re.match(expected, message), message


def test_given_text_then_no_binary_kind_is_reported():
    assert binary_kind("Ein Satz mit Umlauten: äöü.\nAnother line.\n".encode()) is None
    assert binary_kind(b"") is None


def test_directories_are_walked_in_sorted_order_without_hidden_files(tmp_path: Path):
    for name in ["b/2.txt", "a.txt", "b/1.txt", ".hidden/x.txt", "b/.y.txt", "b/readme.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("word\n")
    single = tmp_path / "b" / "2.txt"
    assert expand_inputs([single, tmp_path]) == [single, tmp_path / "a.txt", tmp_path / "b/1.txt", single]
    named = tmp_path / "b" / "readme.md"  # a file named directly is read whatever its name
    assert expand_inputs([named, tmp_path], "*.md") == [named, named]
