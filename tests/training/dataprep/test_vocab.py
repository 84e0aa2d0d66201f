"""Tests of training.dataprep.vocab: the vocab.txt it writes and what can load it."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest
from tokenizers import BertWordPieceTokenizer
from transformers import BertTokenizerFast

from tests.training.conftest import run_module
from training.dataprep.synthetic import write_corpus
from training.dataprep.vocab import (
    FAST_PATH_EXTRA_CHARACTERS,
    SPECIAL_TOKENS,
    WordPieceEncoder,
    bert_tokenizer,
    read_vocab,
    train_vocab,
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_module("training.dataprep.vocab", *args)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", n_docs=80, seed=11)


@pytest.fixture(scope="module")
def cli_vocab(corpus: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    result = run_cli("--input", str(corpus), "--output", str(out), "--vocab_size", "300", "--no_progress")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote 300 tokens to {out}"
    return out


def test_vocab_has_specials_first_and_respects_the_size(cli_vocab: Path):
    tokens = cli_vocab.read_text(encoding="utf-8").splitlines()
    assert tuple(tokens[:5]) == SPECIAL_TOKENS
    assert len(tokens) == 300  # the corpus has more than 300 subwords, so the bound is reached
    assert len(set(tokens)) == len(tokens)
    assert any(t.startswith("##") for t in tokens)
    assert not any(c.isupper() for t in tokens[5:] for c in t)  # lower-cased by default


@pytest.mark.parametrize("size", [7, 40, 120])
def test_small_sizes_stay_within_the_bound(corpus: Path, tmp_path: Path, size: int):
    tokens = (
        train_vocab([corpus], tmp_path / "vocab.txt", vocab_size=size)
        .read_text(encoding="utf-8")
        .split("\n")[:-1]
    )
    assert len(tokens) <= size
    assert tuple(tokens[:5]) == SPECIAL_TOKENS and len(tokens) > 5


def test_hugging_face_tokenizers_load_it_and_agree(cli_vocab: Path, corpus: Path):
    vocab = read_vocab(cli_vocab)
    ours = bert_tokenizer(vocab)
    wordpiece = BertWordPieceTokenizer(str(cli_vocab), lowercase=True)
    # transformers 5 reads a vocab.txt from a folder (or vocab=path); vocab_file= is ignored.
    fast = BertTokenizerFast.from_pretrained(str(cli_vocab.parent))
    assert wordpiece.get_vocab_size() == fast.vocab_size == len(vocab) == 300
    assert (fast.cls_token_id, fast.sep_token_id, fast.mask_token_id, fast.pad_token_id) == (
        vocab["[CLS]"],
        vocab["[SEP]"],
        vocab["[MASK]"],
        vocab["[PAD]"],
    )
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line][:200]
    for line in lines:
        ids = ours.encode(line, add_special_tokens=False).ids
        assert vocab["[UNK]"] not in ids
        assert wordpiece.encode(line, add_special_tokens=False).ids == ids
        assert fast(line, add_special_tokens=False)["input_ids"] == ids


def test_no_lower_case_keeps_capitals(corpus: Path, tmp_path: Path):
    tokens = (
        train_vocab([corpus], tmp_path / "vocab.txt", vocab_size=300, lower_case=False).read_text().split()
    )
    assert any(c.isupper() for t in tokens[5:] for c in t)


@pytest.mark.parametrize(
    "case, extra, expected",
    [
        ("missing input", ["--input", "{tmp}/none.txt"], r"--input \S+none\.txt: no such file or directory"),
        ("empty corpus", ["--input", "{tmp}/blank.txt"], r"--input \S+blank\.txt: corpus is empty"),
        (
            "empty folder",
            ["--input", "{tmp}/empty"],
            r"--input \S+empty: directory holds no file matching '\*\.txt'",
        ),
        ("tiny size", ["--vocab_size", "5"], r"--vocab_size 5: leaves no room for ordinary tokens"),
        ("output is a folder", ["--output", "{tmp}"], r"--output \S+: is a directory"),
    ],
)
def test_bad_input_fails_with_one_line(
    corpus: Path, tmp_path: Path, case: str, extra: list[str], expected: str
):
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    (tmp_path / "empty").mkdir()
    args = {"--input": str(corpus), "--output": str(tmp_path / "vocab.txt")}
    args.update(dict(zip(extra[::2], (value.format(tmp=tmp_path) for value in extra[1::2]), strict=True)))
    result = run_cli(*[item for pair in args.items() for item in pair], "--no_progress")
    assert result.returncode == 2, (case, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m training.dataprep.vocab: error: "), lines
    assert re.search(expected, lines[0]), lines[0]
    assert not (tmp_path / "vocab.txt").exists()


ODD_LINES = [
    "Café naïve façade — “quoted” text",  # accents are stripped when lower-casing
    "בּהגפי לעגי מעוג and σημει̑ον",  # Hebrew points and a combining mark
    "tab\tinside and a bell \x07 control",
    "中文字符 mixed with ASCII",
    "\u00a0no-break\u2009spaces\u200b",
]


def _ascii_lines(seed: int, count: int) -> list[str]:
    """Lines of random fast-path characters: words, digits, all punctuation, odd spacing."""
    rng = random.Random(seed)
    printable = [chr(c) for c in range(0x20, 0x7F)] + list(FAST_PATH_EXTRA_CHARACTERS)
    words = ["river", "Mountain", "don't", "U.S.A.", "e-mail", "3.14", "C++", "x_y", "#tag", "@home"]
    lines = []
    for _ in range(count):
        parts = [
            rng.choice(words) if rng.random() < 0.6 else "".join(rng.choices(printable, k=rng.randint(1, 8)))
            for _ in range(rng.randint(1, 30))
        ]
        lines.append(rng.choice([" ", "  ", ""]).join(parts).strip() or "x")
    return lines


@pytest.mark.parametrize("lower_case", [True, False])
def test_fast_encoder_gives_the_ids_of_tokenizers_on_every_line(
    corpus: Path, tmp_path: Path, lower_case: bool
):
    ascii_lines = _ascii_lines(seed=5, count=3000)
    text = tmp_path / "mixed.txt"
    text.write_text("\n".join(ascii_lines + ODD_LINES) + "\n", encoding="utf-8")
    vocab_path = train_vocab([corpus, text], tmp_path / "vocab.txt", vocab_size=2000, lower_case=lower_case)
    reference = bert_tokenizer(read_vocab(vocab_path), lower_case)
    encoder = WordPieceEncoder(vocab_path, lower_case)
    lines = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    singles = [chr(c) for c in range(0x20, 0x7F)] + list(FAST_PATH_EXTRA_CHARACTERS)
    lines += (
        ascii_lines
        + ODD_LINES
        + singles
        + [f"Word{c}word {c}x" for c in singles]
        + [" ".join(ascii_lines)[:200_000]]
    )
    expected = [e.ids for e in reference.encode_batch_fast(lines, add_special_tokens=False)]
    got = encoder.encode(lines)
    assert len(got) == len(expected)
    mismatches = [line[:80] for line, a, b in zip(lines, got, expected, strict=True) if a != b]
    assert mismatches == []
    assert len(expected[-1]) > 50_000  # the long line was not truncated
    assert sum(map(len, expected)) > 100_000
