"""``index``: a corpus encoded into a FAISS index directory."""

from bert_whitening.commands.base import ENCODER_INPUTS, Command, Paths, encoder_config, start
from bert_whitening.commands.options import codes_option, hnsw_int, model_options, positive_int, whitening_options
from bert_whitening.data import check_readable
from bert_whitening.io.atomic import DIRECTORY
from bert_whitening.retrieval.index_directory import RESCORE


def add_arguments(parser):
    model_options(parser, None)
    whitening_options(parser)
    parser.add_argument(
        "--hnsw-m",
        "--hnsw",  # its earlier name; --hnsw-m is eval-retrieval's too
        dest="hnsw",
        type=hnsw_int,
        default=0,
        metavar="M",
        help="build an approximate HNSW index with M neighbours per node (0: exact IndexFlatIP)",
    )
    codes_option(
        parser,
        "what the index searches: float32 the vectors; int8 or binary their codes (int8 needs --whitening "
        "and k > 0), exactly, with the float32 vectors kept on disk to rescore the candidates",
        default="float32",
    )
    parser.add_argument(
        "--rescore",
        type=positive_int,
        default=RESCORE,
        metavar="N",
        help="with --codes int8 or binary: a search takes the N rows nearest by codes (at least its --top-k) "
        "and ranks them by their exact float32 cosine, the score it shows",
    )
    parser.add_argument(
        "--from-vectors",
        metavar="FILE.npy",
        help="index the rows of an `encode` output; INPUT, if given, is the "
        "sentence file they came from (for the keys)",
    )
    parser.add_argument(
        "--from-beam",
        metavar="PATTERN",
        help="index `beam-encode` TFRecord shards, e.g. 'out/vectors-*' (their keys: no INPUT or --from-vectors)",
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="index directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output directory")
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="sentence files, one per line")


def run_index(args):
    from bert_whitening.retrieval.search import IndexOptions, build_index, check_index_codes, check_index_sources

    check_index_sources(args.inputs, args.from_vectors, args.from_beam)
    check_readable(args.inputs + [path for path in (args.from_vectors,) if path])
    config = encoder_config(args, whitened=True)
    options = IndexOptions(
        hnsw_m=args.hnsw, batch_size=args.batch_size, overwrite=args.overwrite, codes=args.codes, rescore=args.rescore
    )
    check_index_codes(config, options)
    start(args)
    build_index(config, args.output, options, args.inputs, args.from_vectors, args.from_beam)


COMMAND = Command(
    name="index",
    help="encode a corpus into a FAISS index directory",
    description="Encode every line of the INPUT sentence files (streamed, any size) and write "
    "a directory with the FAISS index (index.faiss), the file and line of each "
    "vector (keys.tsv) and what made them (index.json: model, pooling, whitening "
    "sha256, k, codes, bytes a vector), all at once: a failure leaves no directory. With --codes int8 "
    "or binary the index holds the codes and vectors.npy the float32 vectors that rescore a search's "
    "candidates. --from-vectors or "
    "--from-beam index vectors already encoded; the encoder options then say "
    "what encoded them. Needs `pip install bert-whitening[search]`.",
    add_arguments=add_arguments,
    run=run_index,
    paths=Paths({"output": DIRECTORY}, ("inputs", "from_vectors") + ENCODER_INPUTS, globs=("from_beam",)),
    weights_read_only=True,
)
