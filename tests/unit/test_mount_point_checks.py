"""What stops a node's mount points, found before anything starts (issue 41, R12): never a request to create them
on this machine (they are made in the node's own namespace), only what cannot be made without writing outside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.host import mount_points, volumes
from mlrecipe.backends.host.volumes import Mount, mount_problems


def test_a_missing_mount_point_is_no_problem_for_an_ordinary_user(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr(volumes, "user_namespaces_problem", lambda: None)  # whatever this machine's settings
    missing = tmp_path / "not-there" / "fsx"
    assert mount_problems([Mount(tmp_path / "volume", str(missing))]) == []
    assert not missing.parent.exists()  # checking creates nothing


def test_a_missing_mount_point_below_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    problems = mount_problems([Mount(tmp_path / "volume", str(tmp_path / "link" / "fsx"))])
    assert problems == [f"mount point {tmp_path}/link/fsx: {tmp_path}/link is a symbolic link; name the path "
                        "without links"]
    assert not (tmp_path / "real" / "fsx").exists()


def test_an_existing_mount_point_of_another_kind_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "volume").mkdir()
    problems = mount_problems([Mount(tmp_path / "volume", str(tmp_path / "file"))])
    assert problems == [f"mount point {tmp_path}/file is a file, unlike its source {tmp_path}/volume"]


def test_without_user_namespaces_an_ordinary_user_is_told_what_to_do(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sys" / "user").mkdir(parents=True)
    (tmp_path / "sys" / "user" / "max_user_namespaces").write_text("0\n")
    monkeypatch.setattr(mount_points.os, "geteuid", lambda: 1000)
    assert mount_points.user_namespaces_problem(tmp_path) == (
        "user namespaces are off (/proc/sys/user/max_user_namespaces is 0)")
    (tmp_path / "sys" / "user" / "max_user_namespaces").write_text("15000\n")
    assert mount_points.user_namespaces_problem(tmp_path) is None
    monkeypatch.setattr(mount_points.os, "geteuid", lambda: 0)
    (tmp_path / "sys" / "user" / "max_user_namespaces").write_text("0\n")
    assert mount_points.user_namespaces_problem(tmp_path) is None  # root needs no user namespace
