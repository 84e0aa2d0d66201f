"""Files written whole on the shared file system (trainium_job.files)."""

from __future__ import annotations

import os
import stat

from trainium_job.files import write_whole


def test_given_a_file_written_whole_then_it_has_the_mode_open_gives_and_no_temporary_file_is_left(tmp_path):
    # Given a process umask of 022 (the container runtime's: runc's default)
    before = os.umask(0o022)
    try:
        write_whole(tmp_path / "marker.json", "{}\n")
        (tmp_path / "plain.json").write_text("{}\n")  # what open() makes
    finally:
        os.umask(before)
    # Then other users may read it (a pod of another user reads a marker), as open()'s file
    mode = stat.S_IMODE((tmp_path / "marker.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644
    assert (tmp_path / "marker.json").read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marker.json", "plain.json"]


def test_given_a_file_written_again_then_the_new_text_replaces_the_old(tmp_path):
    write_whole(tmp_path / "a" / "record.json", "old")
    write_whole(tmp_path / "a" / "record.json", "new")
    assert (tmp_path / "a" / "record.json").read_text() == "new"
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["record.json"]
