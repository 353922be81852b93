"""An export is bound to its record: the sha256 of every file it wrote, taken before the
verification, checked again before the rename and by `check_export`."""

import json
import os
import shutil

import pytest

from bert_whitening.export import ExportError, check_export, export_saved_model
from bert_whitening.export import saved_model as saved_model_module

pytestmark = pytest.mark.slow

DATA = "variables/variables.data-00000-of-00001"


@pytest.mark.xdist_group("exported")
@pytest.mark.parametrize("name", [DATA, "variables/variables.index", "saved_model.pb"])
def test_check_export_refuses_an_edited_file_in_one_line_naming_it(exported, tmp_path, name):
    copy = tmp_path / "1"
    shutil.copytree(exported[1], copy)
    record = check_export(str(copy))
    assert {DATA, "variables/variables.index", "saved_model.pb"} <= set(record["files"])
    assert record["signatures"] == ["serve_dimensions", "serve_text", "serve_text_dimensions", "serving_default"]
    with open(copy / name, "r+b") as stream:
        stream.seek(os.path.getsize(copy / name) // 2)
        byte = stream.read(1)
        stream.seek(-1, os.SEEK_CUR)
        stream.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(ExportError) as raised:
        check_export(str(copy))
    assert str(raised.value) == (
        "%s: %s is not the file this export was written with (sha256 differs from "
        "assets/bert_whitening.json's %s...): the directory was edited" % (copy, name, record["files"][name][:12])
    )
    (copy / "assets" / "bert_whitening.json").write_text(json.dumps(dict(record, files=None)), encoding="utf-8")
    with pytest.raises(ExportError, match="lists no sha256 of the SavedModel's files"):
        check_export(str(copy))


def test_a_variable_edited_while_the_export_is_verified_is_not_published(whitened, tmp_path, monkeypatch):
    verify = saved_model_module.verify

    def verify_then_edit(process, directory, *args):
        difference = verify(process, directory, *args)
        with open(os.path.join(directory, DATA), "r+b") as stream:  # in place, after the child loaded it
            stream.write(bytes([stream.read(1)[0] ^ 0x01]))
        return difference

    monkeypatch.setattr(saved_model_module, "verify", verify_then_edit)
    with pytest.raises(ExportError, match="changed while it was verified, nothing was written .*%s" % DATA):
        export_saved_model(whitened, str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []


def test_a_directory_renamed_over_the_staged_export_is_not_published(whitened, exported, tmp_path, monkeypatch):
    verify = saved_model_module.verify

    def verify_then_swap(process, directory, *args):
        difference = verify(process, directory, *args)
        staging = os.path.realpath(directory)
        os.rename(staging, tmp_path / "verified")
        shutil.copytree(exported[1], staging)  # a consistent export, but not the one verified
        return difference

    monkeypatch.setattr(saved_model_module, "verify", verify_then_swap)
    with pytest.raises(ExportError, match="another directory was renamed over it"):
        export_saved_model(whitened, str(tmp_path / "m"))
    assert not os.path.exists(tmp_path / "m" / "1")
