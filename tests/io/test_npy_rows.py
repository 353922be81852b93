"""`NpyRowWriter`: rows of floats or codes appended, an array numpy reads, nothing half-written."""

import numpy as np
import pytest

from bert_whitening.io.npy_rows import NpyRowWriter


@pytest.mark.parametrize("dtype", ["<f4", "int8", "uint8"])
def test_rows_of_each_dtype_read_back_as_they_were_written(tmp_path, dtype):
    rows = (np.arange(30).reshape(10, 3) - 15).astype(dtype)
    with NpyRowWriter(tmp_path / "a.npy", 3, dtype) as out:
        out.append(rows[:4])
        out.append(rows[4:])
    assert out.rows == 10
    read = np.load(tmp_path / "a.npy")
    assert read.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(read, rows)


def test_rows_of_another_kind_or_width_are_refused(tmp_path):
    with NpyRowWriter(tmp_path / "a.npy", 3, "int8") as out:
        with pytest.raises(ValueError, match="expected rows of int8, got float64"):
            out.append(np.zeros((1, 3)))
        with pytest.raises(ValueError, match="expected rows of dimension 3"):
            out.append(np.zeros((1, 4), np.int8))
        out.append(np.zeros((2, 3), np.float64).astype(np.int8))
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.zeros((2, 3)))


def test_a_writer_that_did_not_close_leaves_no_array(tmp_path):
    with pytest.raises(RuntimeError):
        with NpyRowWriter(tmp_path / "a.npy", 2) as out:
            out.append(np.ones((1, 2), np.float32))
            raise RuntimeError("stop")
    with pytest.raises(ValueError):
        np.load(tmp_path / "a.npy")
