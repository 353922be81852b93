"""The ``--plot`` figure of ``eval`` (`bert_whitening.plots`): raw is not a point of the whitened
curve (a line from raw at k = 0 to the first k drew a trend that no setting has)."""

import numpy as np

from bert_whitening.plots import plot_report, report_figure


def result(method, k, score):
    return {"method": method, "n_components": k, "splits": {"test": score, "valid": score / 2}}


REPORT = {
    "model": {"name": "tiny_bert"},
    "pooling": "first-last-avg",
    "tasks": {
        "T": {
            "rank": 8,
            "results": [
                result("raw", 0, 0.1),
                result("whitening", 8, 0.4),
                result("whitening", 4, 0.3),
                result("flow", 8, 0.2),
            ],
        }
    },
}


def test_raw_and_flows_are_markers_apart_from_the_whitened_line(tmp_path):
    figure = report_figure(REPORT, {"T": np.linspace(1, 0.1, 8)})
    lines = figure.axes[0].get_lines()
    by_label = {line.get_label(): line for line in lines}
    for split, scale in (("test", 1), ("valid", 0.5)):
        whitened = by_label["%s, whitened" % split]
        assert list(whitened.get_xdata()) == [4, 8] and list(whitened.get_ydata()) == [0.3 * scale, 0.4 * scale]
        raw = by_label["%s, raw" % split]
        assert list(raw.get_xdata()) == [0] and raw.get_linestyle() == "None" and raw.get_marker() == "s"
        assert by_label["%s, flow" % split].get_linestyle() == "None"
        level = [line for line in lines if line.get_linestyle() == ":" and line.get_color() == whitened.get_color()]
        assert [list(line.get_ydata()) for line in level] == [[0.1 * scale, 0.1 * scale]]  # raw's level, across
    assert not [line for line in lines if line.get_linestyle() == "-" and 0 in list(line.get_xdata())]
    plot_report(REPORT, {"T": np.linspace(1, 0.1, 8)}, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
