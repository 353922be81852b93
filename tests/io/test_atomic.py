"""What an output path means, decided once in `bert_whitening.io.atomic`: links written through,
special files and the inputs themselves refused, temporaries kept alive by a lock."""

import errno
import fcntl
import logging
import os
import stat

import pytest

from bert_whitening.errors import BertWhiteningError
from bert_whitening.io import atomic
from bert_whitening.io.atomic import (
    CLAIM,
    MARK,
    OutputAppeared,
    check_output,
    claimed_prefix,
    placed_outputs,
    private_temporary_directory,
    publish_directory,
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
    import bert_whitening.io.atomic as atomic

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


def fill(staging):
    with open(os.path.join(staging, "new"), "w", encoding="utf-8") as stream:
        stream.write("new")
    return staging


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "no renameat2"])
@pytest.mark.parametrize("made", ["empty directory", "directory", "file", "dangling link"])
def test_an_output_made_while_a_run_worked_is_left_and_the_run_refused(tmp_path, monkeypatch, exchange, made):
    """Without overwrite, whatever appeared at the target since the run's start is kept as it was
    (a plain rename would replace an empty directory), the staging is removed, and the refusal
    says so in one line."""
    if not exchange:
        monkeypatch.setattr(atomic, "_renameat2", lambda *arguments: False)
    target = tmp_path / "out"
    make = {
        "empty directory": lambda: target.mkdir(),
        "directory": lambda: (target.mkdir(), (target / "mine").write_text("kept")),
        "file": lambda: target.write_text("kept"),
        "dangling link": lambda: target.symlink_to(tmp_path / "nowhere"),
    }[made]
    with pytest.raises(OutputAppeared, match="out was made while this run worked"):
        with staged_directory(str(target)) as staging:
            fill(staging)
            make()
            before = sorted(os.listdir(target)) if target.is_dir() else None
            publish_directory(staging, str(target))
    assert sorted(os.listdir(tmp_path)) == ["out"]
    if made == "dangling link":
        assert target.is_symlink()
    elif made == "file":
        assert target.read_text() == "kept"
    else:
        assert sorted(os.listdir(target)) == before


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "no renameat2"])
def test_overwrite_puts_the_new_output_in_place_and_removes_the_old_one(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(atomic, "_renameat2", lambda *arguments: False)
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    with staged_directory(str(target)) as staging:
        publish_directory(fill(staging), str(target), overwrite=True)
    assert os.listdir(target) == ["new"] and os.listdir(tmp_path) == ["out"]
    with staged_directory(str(tmp_path / "fresh")) as staging:  # overwrite with nothing there: a rename
        publish_directory(fill(staging), str(tmp_path / "fresh"), overwrite=True)
    assert os.listdir(tmp_path / "fresh") == ["new"]


def test_overwrite_never_leaves_the_target_missing_under_a_signal(tmp_path):
    """The old and the new output are exchanged in one step: a signal right after it finds the
    new one in place, and the old one where the staged directory's clean-up removes it."""
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    real_rmtree = atomic.shutil.rmtree
    staged = []

    def interrupted(path, *arguments, **options):
        if path == staged[0]:
            assert os.listdir(target) == ["new"] and os.listdir(path) == ["old"]
            raise KeyboardInterrupt
        return real_rmtree(path, *arguments, **options)

    with pytest.raises(KeyboardInterrupt):
        with staged_directory(str(target)) as staging:
            staged.append(fill(staging))
            atomic.shutil.rmtree = interrupted
            try:
                publish_directory(staging, str(target), overwrite=True)
            finally:
                atomic.shutil.rmtree = real_rmtree
    assert os.listdir(target) == ["new"] and os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "no renameat2"])
def test_placed_outputs_lists_each_output_put_in_place_in_full_and_nothing_else(tmp_path, monkeypatch, exchange):
    """What an interrupted command says it wrote: files and directories once renamed into place,
    not a failed or refused one, nor a file the run replaces as it goes (``output=False``)."""
    if not exchange:
        monkeypatch.setattr(atomic, "_renameat2", lambda *arguments: False)

    def failing(path):
        raise OSError(28, "No space left on device", path)

    (tmp_path / "taken").mkdir()
    (tmp_path / "replaced").mkdir()
    with placed_outputs() as outer:
        with placed_outputs() as placed:
            write_atomically(str(tmp_path / "a.txt"), write_text("a"))
            write_atomically(str(tmp_path / "state.npz"), write_text("s"), output=False)
            with pytest.raises(OSError, match="No space"):
                write_atomically(str(tmp_path / "full.txt"), failing)
            with staged_directory(str(tmp_path / "index")) as staging:
                publish_directory(fill(staging), str(tmp_path / "index"))
            with pytest.raises(OutputAppeared), staged_directory(str(tmp_path / "taken")) as staging:
                publish_directory(fill(staging), str(tmp_path / "taken"))
            with staged_directory(str(tmp_path / "replaced")) as staging:
                publish_directory(fill(staging), str(tmp_path / "replaced"), overwrite=True)
            write_atomically(str(tmp_path / "a.txt"), write_text("again"))
        write_atomically(str(tmp_path / "later.txt"), write_text("b"))
    write_atomically(str(tmp_path / "unwatched.txt"), write_text("c"))
    expected = [str(tmp_path / name) for name in ("a.txt", "index", "replaced")]
    assert placed == expected and outer == expected + [str(tmp_path / "later.txt")]


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


def test_a_prefix_a_live_run_claims_is_refused_to_another_and_free_again_after(tmp_path):
    """Two runs writing shards under one prefix would leave two sets mixed: the second claim is
    refused while the first is held (a lock: another process's or, as here, another open file)."""
    prefix = str(tmp_path / "new" / "vectors")
    with claimed_prefix(prefix) as claimed:
        assert claimed
        (claim,) = os.listdir(tmp_path / "new")
        assert claim.startswith(".vectors" + MARK) and claim.endswith(CLAIM)
        with pytest.raises(BertWhiteningError, match=r"cannot write .*vectors: another run writes it now"):
            with claimed_prefix(prefix):
                pass
        assert os.listdir(tmp_path / "new") == [claim]  # the refused run took its own claim back
    assert os.listdir(tmp_path / "new") == []
    with claimed_prefix(prefix), claimed_prefix(str(tmp_path / "new" / "other")):
        pass  # another prefix in the same directory is another output


def test_a_killed_runs_claim_is_removed_and_a_failed_first_claim_leaves_no_directory(tmp_path):
    (tmp_path / "out").mkdir()
    left = tmp_path / "out" / (".vectors%s4000000-abcdefgh%s" % (MARK, CLAIM))  # no lock: its run is gone
    left.write_bytes(b"")
    os.utime(left, (1, 1))
    with claimed_prefix(str(tmp_path / "out" / "vectors")):
        assert not left.exists()
    with pytest.raises(RuntimeError):
        with claimed_prefix(str(tmp_path / "made" / "deeper" / "vectors")):
            assert (tmp_path / "made" / "deeper").is_dir()
            raise RuntimeError("the pipeline failed")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    with claimed_prefix("gs://bucket/vectors") as claimed:
        assert not claimed  # nothing to lock there


def test_outputs_that_could_only_fail_at_the_end_are_refused_up_front(tmp_path):
    """A name longer than a file system takes (the final rename would fail after the work), a
    loop of symbolic links (no file to write; a rename would replace the link), and a link to
    a pipe through /proc/self/fd (whose target name resolves to no path) are refused by the one
    output check."""
    with pytest.raises(BertWhiteningError, match="its name is longer than 255 bytes"):
        check_output(str(tmp_path / ("v" * 252 + ".npy")))
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(BertWhiteningError, match="its symbolic links make a loop"):
        check_output(str(tmp_path / "loop1"))
    read_end, write_end = os.pipe()
    try:
        (tmp_path / "pipe.npy").symlink_to("/proc/self/fd/%d" % write_end)
        with pytest.raises(BertWhiteningError, match="pipe.npy: it is a FIFO"):
            check_output(str(tmp_path / "pipe.npy"))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert check_output(str(tmp_path / ("v" * 251 + ".npy"))) == str(tmp_path / ("v" * 251 + ".npy"))


def test_a_full_disk_names_the_output_once_and_no_temporary(tmp_path):
    """Inside a staged directory (a saved encoder's whitening file), a full disk was named twice
    over, the staging's temporary name among them, and the path repeated after the reason."""
    import errno

    from bert_whitening.io.atomic import staged_directory, write_atomically

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    with pytest.raises(OSError) as raised:
        write_atomically(str(tmp_path / "w.npz"), full)
    assert str(raised.value) == "[Errno 28] cannot write %s: No space left on device" % (tmp_path / "w.npz")
    with pytest.raises(OSError) as raised:
        with staged_directory(str(tmp_path / "saved")) as staging:
            write_atomically(os.path.join(staging, "w.npz"), full)
    assert str(raised.value) == "[Errno 28] cannot write %s: No space left on device" % (tmp_path / "saved")
    with pytest.raises(OSError) as raised:  # a file the library writes itself in the staging (TensorFlow's)
        with staged_directory(str(tmp_path / "saved")) as staging:
            full(os.path.join(staging, "variables", "variables.index"))
    assert str(raised.value) == "[Errno 28] cannot write %s: No space left on device" % (tmp_path / "saved")
    assert os.listdir(tmp_path) == []


def test_without_an_exchange_a_failed_second_rename_puts_the_old_output_back(tmp_path, monkeypatch):
    """Two renames stand in for the exchange (NFS): if the new one cannot take the old one's
    place, the old one comes back; it was left aside, where the next run removed it."""
    monkeypatch.setattr(atomic, "_renameat2", lambda *arguments: False)
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    real_rename, calls = os.rename, []

    def second_fails(source, destination):
        calls.append(destination)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_rename(source, destination)

    with pytest.raises(OSError, match="Input/output error"):
        with staged_directory(str(target)) as staging:
            monkeypatch.setattr(atomic.os, "rename", second_fails)
            try:
                publish_directory(fill(staging), str(target), overwrite=True)
            finally:
                monkeypatch.setattr(atomic.os, "rename", real_rename)
    assert os.listdir(target) == ["old"] and os.listdir(tmp_path) == ["out"]


def test_an_output_left_aside_by_a_killed_run_is_put_back_by_the_next(tmp_path, monkeypatch, caplog):
    """SIGKILL between the two renames: the old output lies aside under a temporary's name, which
    the next run writing there removed as stale."""
    target = tmp_path / "out"
    aside = tmp_path / (".out%s999-abcd%s" % (atomic.MARK, atomic.RETIRED))
    aside.mkdir()
    (aside / "old").write_text("old")
    other = tmp_path / (".other%s999-abcd%s" % (atomic.MARK, atomic.RETIRED))  # another output's: left alone
    other.mkdir()
    monkeypatch.setattr(atomic, "STALE_AFTER_SECONDS", 0)
    with caplog.at_level(logging.WARNING):
        atomic.remove_stale(str(target))
    assert os.listdir(target) == ["old"] and sorted(os.listdir(tmp_path)) == [other.name, "out"]
    assert "put back from" in caplog.text
    assert not (aside.exists())
    (tmp_path / "out" / "old").write_text("kept")
    aside.mkdir()  # a leftover of a swap that completed: the output is in place, so it goes
    atomic.remove_stale(str(target))
    assert sorted(os.listdir(tmp_path)) == [other.name, "out"] and (target / "old").read_text() == "kept"


def test_a_signal_waits_for_the_steps_it_must_not_part():
    import signal

    # Python's own handler, whatever the test process inherited: a job started in the
    # background by a shell without job control has SIGINT ignored, and keeps it ignored here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with atomic._signals_held():
                signal.raise_signal(signal.SIGINT)  # handled in this thread before it returns
                done.append("the second rename")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done == ["the second rename"]


def test_a_signal_ignored_before_stays_ignored_after_the_block():
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with atomic._signals_held():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_failed_run_removes_its_temporary_from_a_directory_renamed_meanwhile(tmp_path, kind):
    """The output's directory renamed during the run (and a new one made under its name): the
    clean-up went by path, into the new directory, and left the temporary in the renamed one."""
    (tmp_path / "out").mkdir()

    def rename_then_fail(path):
        os.rename(tmp_path / "out", tmp_path / "moved")
        (tmp_path / "out").mkdir()
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        if kind == "file":
            write_atomically(str(tmp_path / "out" / "v.npy"), rename_then_fail)
        else:
            with staged_directory(str(tmp_path / "out" / "index")) as staging:
                rename_then_fail(staging)
    assert os.listdir(tmp_path / "moved") == [] and os.listdir(tmp_path / "out") == []


def test_a_run_writing_a_file_removes_a_killed_runs_temporary_and_keeps_its_own_locked(tmp_path, monkeypatch):
    """write_atomically clears what a SIGKILLed run left beside its output, and its own temporary
    is locked while it writes: another run's clean-up, even one that judges every temporary old
    enough, leaves it (a shared lock, or none, let that run remove a live run's file)."""
    left = temporary_of(tmp_path, 4_000_000)  # no lock: its run is gone
    monkeypatch.setattr(atomic, "STALE_AFTER_SECONDS", 0)
    seen = []

    def write(path):
        seen.append(left.exists())
        write_text("new")(path)
        remove_stale(str(tmp_path / "out.npy"))  # another run writing the same output, meanwhile
        seen.append(os.path.exists(path))

    write_atomically(str(tmp_path / "out.npy"), write)
    assert seen == [False, True] and os.listdir(tmp_path) == ["out.npy"]
    assert (tmp_path / "out.npy").read_text(encoding="utf-8") == "new"


def test_an_output_set_aside_just_now_is_left_to_the_run_that_set_it_aside(tmp_path, caplog):
    """A rename keeps a directory's modification time: an old output a live run has just set
    aside (its change time is now) is not yet a killed run's, and is not put back under it."""
    aside = tmp_path / (".out%s999-abcd%s" % (MARK, atomic.RETIRED))
    aside.mkdir()
    os.utime(aside, (1, 1))  # an old output's modification time; its change time is now
    with caplog.at_level(logging.WARNING):
        remove_stale(str(tmp_path / "out"))
    assert os.listdir(tmp_path) == [aside.name] and "put back" not in caplog.text


def test_an_output_under_a_file_or_in_a_directory_not_writable_is_refused_up_front(tmp_path, monkeypatch):
    """Under a file, the refusal was a bare NotADirectoryError (stat's), not the guard's line."""
    from bert_whitening.io.atomic import DIRECTORY, PREFIX, check_outputs

    (tmp_path / "f.txt").write_text("mine", encoding="utf-8")
    os.chmod(tmp_path / "f.txt", 0o755)  # even one root could search
    for output, kind in [("f.txt/v.npy", atomic.FILE), ("f.txt/sub/out", DIRECTORY), ("f.txt/sub/v", PREFIX)]:
        with pytest.raises(BertWhiteningError, match=r"^cannot write .*%s: .*f.txt is not a directory$" % output):
            check_outputs([(str(tmp_path / output), kind)])
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: path != str(tmp_path) and real_access(path, mode))  # root
    with pytest.raises(BertWhiteningError, match=r"cannot write .*out.npy: directory .* is not writable"):
        check_output(str(tmp_path / "out.npy"))
    assert os.listdir(tmp_path) == ["f.txt"]
