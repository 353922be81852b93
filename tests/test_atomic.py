"""What an output path means, decided once in `bert_whitening.atomic`: links written through,
special files and the inputs themselves refused, temporaries kept alive by a lock."""

import fcntl
import os
import stat

import pytest

from bert_whitening.atomic import (
    MARK,
    check_output,
    private_temporary_directory,
    remove_stale,
    staged_directory,
    write_atomically,
)


def write_text(text):
    def write(path):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)

    return write


def test_a_symlink_output_writes_its_target_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.txt"
    target.write_text("old", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(target)
    write_atomically(str(tmp_path / "link.txt"), write_text("new"))
    assert (tmp_path / "link.txt").is_symlink() and target.read_text(encoding="utf-8") == "new"
    assert [name for name in os.listdir(tmp_path / "real") if MARK in name] == []


def test_a_dangling_symlink_writes_the_file_it_names(tmp_path):
    (tmp_path / "link.txt").symlink_to(tmp_path / "named.txt")
    write_atomically(str(tmp_path / "link.txt"), write_text("new"))
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "named.txt").read_text(encoding="utf-8") == "new"


def special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    found = {"FIFO": fifo}
    if os.geteuid() == 0:
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
        found["character device"] = device
    return found


def test_a_device_or_fifo_output_is_refused_and_left_as_it_is(tmp_path):
    for kind, path in special_files(tmp_path).items():
        mode = os.stat(path).st_mode
        with pytest.raises(ValueError, match="it is a %s" % kind):
            write_atomically(str(path), write_text("vectors"))
        assert os.stat(path).st_mode == mode  # not replaced by a regular file
        link = tmp_path / ("link-to-" + path.name)
        link.symlink_to(path)
        with pytest.raises(ValueError, match="it is a %s" % kind):
            check_output(str(link))


def test_an_output_that_is_an_input_is_refused_by_any_name(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("one\n", encoding="utf-8")
    os.link(source, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(source)
    for name in ("in.txt", "hard.txt", "soft.txt"):
        with pytest.raises(ValueError, match="it is the input"):
            write_atomically(str(tmp_path / name), write_text("vectors"), inputs=[str(source)])
    assert source.read_text(encoding="utf-8") == "one\n"
    with pytest.raises(ValueError, match="it is a directory"):
        check_output(str(tmp_path))
    with pytest.raises(ValueError, match="no directory"):
        check_output(str(tmp_path / "missing" / "out.npy"))


def test_encode_refuses_to_write_over_its_input_before_reading_it(tiny_model, tmp_path, caplog):
    from helpers import run

    source = tmp_path / "in.txt"
    source.write_text("今天天气很好\n", encoding="utf-8")
    assert run("encode", "--model", tiny_model[0], "--output", source, source) == 1
    assert "it is the input" in caplog.text and source.read_text(encoding="utf-8") == "今天天气很好\n"


def temporary_of(tmp_path, pid):
    path = tmp_path / (".out.npy%s%d-abcdefgh" % (MARK, pid))
    path.write_text("partial", encoding="utf-8")
    os.utime(path, (1, 1))  # old enough to be judged
    return path


def test_a_locked_temporary_survives_whatever_its_pid_says(tmp_path):
    held = temporary_of(tmp_path, 4_000_000)  # a PID no process has here (another namespace's)
    descriptor = os.open(held, os.O_RDONLY)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    left = temporary_of(tmp_path, os.getpid())  # a live PID, but nobody holds the lock
    try:
        remove_stale(str(tmp_path / "out.npy"))
        assert held.exists() and not left.exists()
    finally:
        os.close(descriptor)
    remove_stale(str(tmp_path / "out.npy"))
    assert not held.exists()


def test_a_temporary_another_run_removes_first_is_not_an_error(tmp_path, monkeypatch):
    """Two runs clean the same directory: one may lock a leftover file just after the other
    has removed it (the lock is on the inode, the name is gone)."""
    import bert_whitening.atomic as atomic

    leftover = temporary_of(tmp_path, 4_000_000)
    taken = atomic._lock

    def lock_then_lose(path):
        descriptor = taken(path)
        os.unlink(path)  # the other run, between our lock and our unlink
        return descriptor

    monkeypatch.setattr(atomic, "_lock", lock_then_lose)
    remove_stale(str(tmp_path / "out.npy"))
    assert not leftover.exists()


def test_a_long_output_name_gets_a_temporary_within_name_max(tmp_path):
    output = tmp_path / ("v" * 240 + ".npy")
    seen = []
    write_atomically(str(output), lambda path: (seen.append(os.path.basename(path)), write_text("x")(path)))
    assert output.read_text(encoding="utf-8") == "x" and len(os.fsencode(seen[0])) <= 255 and MARK in seen[0]


def test_a_failed_staging_removes_the_parents_it_created(tmp_path):
    with pytest.raises(RuntimeError):
        with staged_directory(str(tmp_path / "base" / "deeper" / "1")):
            raise RuntimeError("verification failed")
    assert os.listdir(tmp_path) == []


def test_a_private_temporary_directory_holds_what_the_run_and_its_children_write(tmp_path, monkeypatch):
    """Inside, Python's temporary files and a child's TMPDIR go to the run's own directory; after
    the block (an error here), it is gone and the previous temporary directory is back."""
    import subprocess
    import sys
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    other = tmp_path / "someone-else.txt"
    other.write_text("kept", encoding="utf-8")
    with pytest.raises(RuntimeError):
        with private_temporary_directory() as directory:
            assert os.path.dirname(directory) == str(tmp_path) and MARK in os.path.basename(directory)
            tempfile.NamedTemporaryFile(delete=False).close()
            child = "import tempfile; open(tempfile.mkstemp()[1], 'w').close(); print(tempfile.gettempdir())"
            said = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
            assert said.strip() == directory and len(os.listdir(directory)) == 2
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == ["someone-else.txt"]
    assert os.environ["TMPDIR"] == str(tmp_path) and tempfile.gettempdir() == str(tmp_path)


def test_a_private_temporary_directory_left_by_a_killed_run_is_removed_by_the_next(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    left = tmp_path / (".command%s4000000-abcdefgh" % MARK)  # no lock: its run is gone
    (left / "sub").mkdir(parents=True)
    (left / "__autograph_generated_file1234.py").write_text("", encoding="utf-8")
    os.utime(left, (1, 1))
    with private_temporary_directory() as directory:
        assert os.listdir(tmp_path) == [os.path.basename(directory)]
    assert os.listdir(tmp_path) == []
