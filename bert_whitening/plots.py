"""The ``--plot`` figures: ``eval``'s Spearman against n_components next to the eigenvalue
spectrum, and ``eval-retrieval``'s quality and FAISS latency against k."""

import logging

import matplotlib

matplotlib.use("Agg")  # headless: no display is needed or used
logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font-cache notes

import matplotlib.pyplot as plt  # noqa: E402

from bert_whitening.retrieval.faiss_indexes import BATCH_QUERIES, QPS_BATCH  # noqa: E402


def plot_report(report, spectra, path):
    """Write `report_figure` as a PNG to ``path``."""
    figure = report_figure(report, spectra)
    with open(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=90)
    plt.close(figure)


def report_figure(report, spectra):
    """One row per task: Spearman per split against k, and the eigenvalues of the fitted
    covariance on a log scale, so a k can be picked by looking. Raw (no whitening) is a square
    at k = 0 with a dotted level across, and flows are crosses at their dimension: neither is a
    point of the whitened curve, so neither is joined to it."""
    tasks = list(report["tasks"])
    figure, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.6 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        left, right = axes[row]
        _draw_spearman(left, report["tasks"][task]["results"])
        codes = _codes(report["tasks"][task]["results"][0])
        title = "%s: Spearman of cosine" % task + ("" if codes == "float32" else " (%s codes)" % codes)
        left.set(title=title, xlabel="n_components (0 = raw)", ylabel="Spearman")
        left.grid(alpha=0.3)
        left.legend(fontsize="small")
        if task in spectra:
            eigenvalues = spectra[task]
            right.semilogy(range(1, len(eigenvalues) + 1), eigenvalues.clip(min=1e-20))
            right.axvline(
                report["tasks"][task].get("rank", len(eigenvalues)), color="grey", linestyle=":", label="rank"
            )
            right.legend()
        right.set(title="%s: covariance eigenvalues" % task, xlabel="component", ylabel="eigenvalue")
        right.grid(alpha=0.3)
    figure.suptitle("%s, %s pooling" % (report["model"]["name"], report["pooling"]))
    figure.tight_layout()
    return figure


def _codes(result):
    """The codes a result row was scored in: float32 for a report written before codes."""
    return result.get("codes", "float32")


def _draw_spearman(axis, results):
    """Per split, one colour: the whitened settings as a line against k, raw and flows as
    markers of their own, in the first code scored (float32 unless it was left out)."""
    results = sorted((r for r in results if _codes(r) == _codes(results[0])), key=lambda r: r["n_components"])
    raw = [r for r in results if r["method"] == "raw"]
    flows = [r for r in results if r["method"] == "flow"]
    whitened = [r for r in results if r["method"] == "whitening"]
    for split in results[0]["splits"]:
        (line,) = axis.plot(
            [r["n_components"] for r in whitened],
            [r["splits"][split] for r in whitened],
            marker="o",
            label="%s, whitened" % split if whitened else None,
        )
        colour = line.get_color()
        for entries, marker, size, name in ((raw, "s", 7, "raw"), (flows, "x", 9, "flow")):
            axis.plot(
                [r["n_components"] for r in entries],
                [r["splits"][split] for r in entries],
                marker,
                color=colour,
                markersize=size,
                label="%s, %s" % (split, name) if entries else None,
            )
        for entry in raw:
            axis.axhline(entry["splits"][split], color=colour, linestyle=":", linewidth=1)


def plot_retrieval(report, path):
    """Per task: MRR@10, Recall@1 and Recall@10 against k (whitened settings with beta = gamma =
    1 as lines, raw as crosses at its dimension), and the FAISS flat latency against k."""
    tasks = list(report["tasks"])
    figure, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.6 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        results = [r for r in report["tasks"][task]["results"] if _codes(r) == "float32"]
        whitened = sorted(
            (r for r in results if r["n_components"] and (r["beta"], r["gamma"]) == (1, 1)), key=lambda r: r["dim"]
        )
        raw = [r for r in results if not r["n_components"]]
        quality, speed = axes[row]
        for metric, colour in (("mrr@10", "C0"), ("recall@1", "C1"), ("recall@10", "C2")):
            quality.plot(
                [r["dim"] for r in whitened],
                [r[metric] for r in whitened],
                marker="o",
                color=colour,
                label=metric + " whitened",
            )
            quality.scatter(
                [r["dim"] for r in raw], [r[metric] for r in raw], marker="x", s=60, color=colour, label=metric + " raw"
            )
        quality.set(title="%s: quality (exact cosine)" % task, xlabel="dimensions k", ylabel="score")
        for label, entries, marker in (("whitened", whitened, "o"), ("raw", raw, "x")):
            speed.plot(
                [r["dim"] for r in entries],
                [r["flat"]["p50_ms"] for r in entries],
                marker=marker,
                color="C0",
                label="one query, p50 (%s)" % label,
            )
            speed.plot(
                [r["dim"] for r in entries],
                [1e3 * BATCH_QUERIES / r["flat"][QPS_BATCH] for r in entries],
                marker=marker,
                color="C3",
                label="batch of %d (%s)" % (BATCH_QUERIES, label),
            )
        speed.set(title="%s: FAISS IndexFlatIP latency" % task, xlabel="dimensions k", ylabel="ms")
        for axis in (quality, speed):
            axis.grid(alpha=0.3)
            axis.legend(fontsize="small")
    figure.suptitle("%s, %s pooling, split %s" % (report["model"]["name"], report["pooling"], report["split"]))
    figure.tight_layout()
    with open(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=80)
    plt.close(figure)
