"""Count the distinct sentences of the shared evaluation data, without the package's readers.

tests/tokenization/test_graph_tokenizer.py checks the in-graph tokenizer on every sentence the package's
`load_task` reads from ../shared/data; this script counts them another way, so a reader that
drops or invents sentences shows up as a different number. It reads the senteval_cn pair files
(``s1<TAB>s2<TAB>label``) and the English STS benchmark from the original ``sts-*.csv`` files
(``genre file year id score s1 s2 ...``), where the package reads ``stsbenchmark.tsv.gz``.

    python scripts/count_shared_sentences.py [DATA_DIR]      # default: ../shared/data
"""

import glob
import os
import sys


def count_distinct_sentences(data_dir):
    sentences = set()
    for path in glob.glob(os.path.join(data_dir, "senteval_cn", "*", "*.data")):
        with open(path, encoding="utf-8", newline="") as stream:
            for line in stream:
                fields = line.rstrip("\r\n").split("\t")
                if len(fields) == 3:
                    sentences.update(fields[:2])
    for path in glob.glob(os.path.join(data_dir, "stsbenchmark", "sts-*.csv")):
        with open(path, encoding="utf-8", newline="") as stream:
            for line in stream:
                sentences.update(line.rstrip("\r\n").split("\t")[5:7])
    return len(sentences)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    data_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "shared", "data")
    print(count_distinct_sentences(data_dir))
