"""Commands never destroy user data: ``conformance export`` replaces only what it wrote,
``lower`` and ``raise`` write through a temporary file and one rename, and write a device or
FIFO through, leaving it as it is."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import dml_onnx
from dml_onnx import conformance
from dml_onnx.conformance import files, points, probes
from dml_onnx.model_files import save_model

ROOT = Path(__file__).resolve().parents[2]



def _model() -> onnx.ModelProto:
    node = dml_onnx.lp_pooling("X", "Y", window_size=[2, 2])
    return dml_onnx.make_model([node], [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [1, 1, 4, 4])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, [1, 1, 3, 3])])


def test_export_keeps_what_it_did_not_write_and_refuses_to_replace_it(tmp_path, cli):
    suite = tmp_path / "suite"
    assert cli("conformance", "export", str(suite)).returncode == 0
    case = next(suite.glob("test_roi_pooling_*"))
    mine = suite / "test_mine"  # a user's folder beside the suite's: left alone
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert conformance.written_by_suite(case) and not conformance.written_by_suite(mine)
    assert cli("conformance", "export", str(suite)).returncode == 0
    assert (mine / "notes.txt").read_text() == "keep" and case.is_dir()

    # a user's file inside a case folder of the suite's name, or in probes/: refused, and
    # nothing at all removed
    (case / "notes.txt").write_text("mine")
    done = cli("conformance", "export", str(suite))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not written by dml-onnx conformance export" in done.stderr.splitlines()[-1]
    assert (case / "notes.txt").read_text() == "mine" and (mine / "notes.txt").exists()
    (case / "notes.txt").unlink()
    (suite / "probes" / "mine.txt").write_text("mine")
    done = cli("conformance", "export", str(suite))
    assert done.returncode == 1 and "probes" in done.stderr
    assert (suite / "probes" / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("content", ["link", "fifo", "foreign model", "other producer"])
def test_a_case_folder_is_the_suites_only_with_its_files_and_model(tmp_path, content):
    folder = tmp_path / "test_x"
    (folder / "test_data_set_0").mkdir(parents=True)
    model = _model()
    if content == "other producer":
        model.producer_name = "somebody"
    (folder / "model.onnx").write_bytes(model.SerializeToString())
    assert conformance.written_by_suite(folder) == (content != "other producer")
    if content == "link":
        (folder / "test_data_set_0" / "input_0.pb").symlink_to("/dev/zero")
    elif content == "fifo":
        os.mkfifo(folder / "test_data_set_0" / "input_0.pb")  # never opened
    elif content == "foreign model":
        (folder / "model.onnx").write_bytes(b"\x00not onnx")
    assert not conformance.written_by_suite(folder)


def test_probes_refuse_a_folder_of_someone_elses():
    assert not files.names_a_point(Path(__file__))


@pytest.mark.parametrize("command", ["lower", "raise"])
def test_in_place_conversion_is_whole_or_not_at_all(tmp_path, command, cli):
    path = tmp_path / "model.onnx"
    onnx.save(_model(), path)
    path.chmod(0o640)
    assert cli(command, str(path), str(path)).returncode == 0
    assert path.stat().st_mode & 0o777 == 0o640  # the file keeps its permissions
    onnx.checker.check_model(onnx.load(path))
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # no temporary left


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "model.onnx"
    onnx.save(_model(), path)
    before = path.read_bytes()

    def broken(source, target):
        Path(source).write_bytes(b"half")  # a write that fails part-way
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        save_model(dml_onnx.lower_model(_model()), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_save_writes_through_a_link_to_its_target(tmp_path):
    target, link = tmp_path / "real.onnx", tmp_path / "link.onnx"
    onnx.save(_model(), target)
    link.symlink_to(target)
    save_model(dml_onnx.lower_model(_model()), link)
    assert link.is_symlink() and onnx.load(target).graph.node[0].domain == ""


def test_a_fifo_target_is_written_through_and_stays_a_fifo(tmp_path, cli):
    """A target that is not a regular file is written through, never replaced by a rename
    (which turned a FIFO or ``/dev/null`` into a regular file): ``lower``'s model arrives in
    the FIFO, which is still there."""
    model, fifo = tmp_path / "model.onnx", tmp_path / "fifo"
    onnx.save(_model(), model)
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # lets the reader open now and see EOF once closed
    reader = os.open(fifo, os.O_RDONLY)
    received: list[bytes] = []

    def read_all() -> None:
        with os.fdopen(reader, "rb") as file:
            received.append(file.read())
    thread = threading.Thread(target=read_all)
    thread.start()
    try:
        done = cli("lower", str(model), str(fifo))
    finally:
        os.close(writer)
        thread.join(60)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "model.onnx"]
    written = onnx.load_from_string(received[0])
    assert written.graph.node and all(node.domain == "" for node in written.graph.node)


def test_a_full_device_is_an_error_and_stays_a_device(tmp_path, cli):
    """``/dev/full`` refuses every write: the command ends with the system's one line and
    exit 1, and the device node is left as it is."""
    full = Path("/dev/full")
    if not (full.is_char_device() and os.access(full, os.W_OK)):
        pytest.skip("no writable /dev/full here: the FIFO test covers writing through")
    before = os.stat(full)
    model = tmp_path / "model.onnx"
    onnx.save(_model(), model)
    done = cli("lower", str(model), str(full))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"dml-onnx lower: [Errno {errno.ENOSPC}] "
                                        f"{os.strerror(errno.ENOSPC)}"]
    with pytest.raises(OSError) as raised:
        save_model(_model(), full)
    assert raised.value.errno == errno.ENOSPC
    after = os.stat(full)
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_ino) == (before.st_rdev,
                                                                              before.st_ino)


# ------------------------------------------------------------------ hostile case folders
def _two_cases(tmp_path: Path) -> tuple[Path, Path, Path]:
    import shutil

    suite = tmp_path / "suite"
    suite.mkdir()
    names = sorted(p.name for p in (ROOT / "models").glob("test_lp_pooling_*")
                   if (p / "config.txt").exists())[:2]
    for name in names:
        shutil.copytree(ROOT / "models" / name, suite / name)
    return suite, suite / names[0], suite / names[1]


@pytest.mark.parametrize("damage", ["fifo input", "input linked to /dev/zero",
                                    "malformed config", "config linked to a fifo"])
def test_a_hostile_case_fails_alone_in_one_line_and_never_hangs(tmp_path, damage, cli):
    suite, bad, good = _two_cases(tmp_path)
    pb, config = bad / "test_data_set_0" / "input_0.pb", bad / "config.txt"
    if damage == "fifo input":
        pb.unlink()
        os.mkfifo(pb)
    elif damage == "input linked to /dev/zero":
        pb.unlink()
        pb.symlink_to("/dev/zero")
    elif damage == "malformed config":
        config.write_text("per_sample_tolerance 1e-3\n")
    else:
        config.unlink()
        os.mkfifo(tmp_path / "fifo")
        config.symlink_to(tmp_path / "fifo")
    done = cli("conformance", "run", str(suite), "--quiet")
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    failed = [line for line in done.stdout.splitlines() if line.startswith(bad.name)]
    assert len(failed) == 1 and ("input_0.pb" in failed[0] or "config.txt" in failed[0])
    assert "1 passed, 1 failed" in done.stdout


@pytest.mark.parametrize("damage", ["fifo", "malformed"])
def test_a_hostile_probe_description_fails_alone(tmp_path, damage):
    import shutil

    folders = sorted((ROOT / "models" / "probes").glob("test_probe_lp_pool_*"))[:1] + sorted(
        (ROOT / "models" / "probes").glob("test_probe_col2im_*"))[:1]
    for folder in folders:
        shutil.copytree(folder, tmp_path / folder.name)
    described = tmp_path / folders[1].name / "probe.json"
    described.unlink()
    if damage == "fifo":
        os.mkfifo(described)
    else:
        described.write_text("[1, 2")
    findings = probes.run_probes(tmp_path)
    by_point = {f.point: f for f in findings}
    assert by_point["lp_pool_odd_p"].reading == points.SPEC
    assert by_point[folders[1].name].reading == probes.ERROR
    assert "probe.json" in by_point[folders[1].name].message
