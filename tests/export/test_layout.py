"""TF Serving's `BASE/N` versions: which `N`, overwrite, and a version taken meanwhile."""

import os

import pytest

from bert_whitening.export import ExportError, target_version
from export.test_saved_model import on_the_export

pytestmark = pytest.mark.slow


def test_a_version_taken_meanwhile_is_kept_and_an_automatic_one_moves_on_even_with_overwrite(tmp_path):
    """``export --overwrite`` without ``--version``: the number it chose was taken by another
    export since; overwrite is for a version the user names, so that one is left as it is."""
    from bert_whitening.export.layout import publish
    from bert_whitening.io.atomic import staged_directory

    base = tmp_path / "m"
    (base / "1").mkdir(parents=True)
    (base / "1" / "theirs").write_text("another export's", encoding="utf-8")
    with staged_directory(str(base / "1")) as staging:
        open(os.path.join(staging, "ours"), "w").close()
        assert publish(staging, str(base), 1, automatic=True, overwrite=True) == str(base / "2")
    assert os.listdir(base / "1") == ["theirs"] and os.listdir(base / "2") == ["ours"]
    assert sorted(os.listdir(base)) == ["1", "2"]


@on_the_export
def test_versions_count_up_and_existing_ones_need_overwrite(over_version_7, tmp_path):
    base = str(tmp_path / "m")
    os.makedirs(os.path.join(base, "7"))
    os.makedirs(os.path.join(base, "notes"))
    assert target_version(base) == 8
    assert target_version(str(tmp_path / "new")) == 1
    with pytest.raises(ExportError, match="7 already exists; pass overwrite"):
        target_version(base, 7)
    assert target_version(base, 7, overwrite=True) == 7
    for bad in ("2", -1, 1.5, 2**63, 2**70):
        with pytest.raises(ExportError, match=r"version must be an integer 0..2\*\*63-1 \(TF Serving's int64"):
            target_version(base, bad)
    for name in ("²", "١", "9" * 30):  # not TF Serving's versions: neither counted nor a traceback
        os.makedirs(os.path.join(base, name))
    assert target_version(base) == 8 and target_version(base, 1) == 1
    os.makedirs(os.path.join(base, str(2**63 - 2)))
    assert target_version(base) == 2**63 - 1  # the last version TF Serving reads is still one to take
    os.makedirs(os.path.join(base, str(2**63 - 1)))
    with pytest.raises(ExportError, match="holds version 9223372036854775807, TF Serving's last: give --version"):
        target_version(base)
    for name in ("²", "١", "9" * 30, str(2**63 - 2), str(2**63 - 1)):
        os.rmdir(os.path.join(base, name))
    parent, base, path = over_version_7
    assert path == os.path.join(base, "7") and os.path.isfile(os.path.join(path, "saved_model.pb"))
    assert not os.path.exists(os.path.join(path, "old"))  # replaced, not merged into
    assert sorted(os.listdir(base)) == ["7", "notes"] and os.listdir(parent) == ["m"]
