"""The ``eval --plot`` figure: Spearman against n_components next to the eigenvalue spectrum."""
import logging

import matplotlib

matplotlib.use("Agg")  # headless: no display is needed or used
logging.getLogger("matplotlib").setLevel(logging.WARNING)  # font-cache notes

import matplotlib.pyplot as plt  # noqa: E402


def plot_report(report, spectra, path):
    """One row per task: Spearman per split against k (raw drawn at k = 0; flows as crosses at
    their dimension), and the eigenvalues of the fitted covariance on a log scale, so a k can be
    picked by looking."""
    tasks = list(report["tasks"])
    figure, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.6 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        results = sorted(report["tasks"][task]["results"], key=lambda r: r["n_components"])
        flows = [r for r in results if r.get("method") == "flow"]
        results = [r for r in results if r not in flows]
        left, right = axes[row]
        for split in (results or flows)[0]["splits"]:
            (line,) = left.plot([r["n_components"] for r in results], [r["splits"][split] for r in results],
                                marker="o", label=split)
            left.plot([r["n_components"] for r in flows], [r["splits"][split] for r in flows], "x",
                      color=line.get_color(), markersize=9, label="%s, flow" % split if flows else None)
        left.set(title="%s: Spearman of cosine" % task, xlabel="n_components (0 = raw)",
                 ylabel="Spearman")
        left.grid(alpha=0.3)
        left.legend()
        if task in spectra:
            eigenvalues = spectra[task]
            right.semilogy(range(1, len(eigenvalues) + 1), eigenvalues.clip(min=1e-20))
            right.axvline(report["tasks"][task].get("rank", len(eigenvalues)), color="grey",
                          linestyle=":", label="rank")
            right.legend()
        right.set(title="%s: covariance eigenvalues" % task, xlabel="component", ylabel="eigenvalue")
        right.grid(alpha=0.3)
    figure.suptitle("%s, %s pooling" % (report["model"]["name"], report["pooling"]))
    figure.tight_layout()
    with open(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=90)
    plt.close(figure)
