"""Index directories: a corpus's vectors, its texts and what encoded them, self-contained and
verified before use.

A directory holds:

- ``index.faiss``: the FAISS index (exact ``IndexFlatIP``, or HNSW) of the L2-normalised vectors,
  or, with ``codes`` binary or int8, the index of their codes
  (`bert_whitening.retrieval.faiss_indexes.code_index`);
- ``vectors.npy``: with codes, the float32 unit vectors, kept on disk and mapped: a search takes
  its ``rescore`` nearest candidates by codes and ranks them by their exact cosines
  (`IndexDirectory.search`), as sentence-transformers' ``semantic_search_faiss`` rescores;
- ``keys.tsv``: ``file<TAB>line`` of each row, in index order, as the file was named when it was
  indexed (shown to the user, never opened again);
- ``texts.jsonl``: the text of each row, one JSON string a line (``null`` for rows indexed from
  vectors alone);
- ``whitening.npz`` or ``flow.npz``: the whitening or the flow that made the vectors, when there
  is one;
- ``index.json``: the `bert_whitening.config.EncoderConfig` record of the encoder, the count, the
  dimension, the kind of index, its codes, the bytes a vector takes in the searched part, the
  rescore count, and the sha256 of each file above.

Search reads nothing outside the directory, so editing, moving or deleting the corpus files later
changes nothing. Opening an index checks, before FAISS reads a byte: that every file is a regular
file (a FIFO or a device under one of these names would block or never end; a link could point
anywhere), and that its sha256 is the one ``index.json`` records, so a damaged, truncated or swapped
file (an ``index.faiss`` copied from another index of the same dimension, say) is refused; what is
read afterwards is read from the descriptors that were checked (`IndexDirectory`). Then
``index.faiss`` must be laid out as the index ``index.json`` describes
(`bert_whitening.retrieval.faiss_indexes.check_index_layout`: kind, codes, count, dimension, every
array within the file), still before FAISS reads it, ``vectors.npy`` a float32 array of ``count`` x
``dim`` exactly (the rows a search rescores must each be a unit vector when read), and the keys and
texts must have ``index.json``'s row count, none longer than `ROW_BYTES` (where each line starts is
taken as they are checked; a search then reads its rows alone, from blocks that must still be the
ones checked: `CheckedFile.line`). A whitening or flow file, read whole, larger than one of the
recorded hidden size can be is refused before it is hashed. ``index.json`` is the root of this
trust: its entries are type-checked, and must describe an index `IndexWriter` writes (its kind,
normalised vectors, the dimension its encoder gives); whoever can rewrite it can rewrite the rest,
but not make a reader allocate more than the files hold.
"""

import contextlib
import dataclasses
import io
import json
import logging
import os

import numpy as np

from bert_whitening.arguments import boolean, options_of, positive_int, vector_array
from bert_whitening.codes import CODES, bytes_per_vector, check_codes, quantizer
from bert_whitening.config import checked_record, versions
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.atomic import check_output_directory, publish_directory, staged_directory
from bert_whitening.io.bounded import (
    FLOW_FILE_BYTES,
    HEADER_ERRORS,
    JSON_BYTES,
    LINE_BYTES,
    NPY_HEADER_BYTES,
    check_memory,
    npy_header,
    whitening_file_bytes,
)
from bert_whitening.io.files import CheckedFile, file_sha256, open_directory, read_limited_at
from bert_whitening.io.npy_rows import NpyRowWriter
from bert_whitening.io.records import Schema, check_fields, parse_json, parse_record
from bert_whitening.retrieval.faiss_indexes import (
    FOURCC,
    add_codes,
    candidates,
    check_graph_m,
    check_hnsw_m,
    check_index_layout,
    code_index,
    faiss,
    faiss_reason,
    hnsw_index,
    read_as_checked,
)
from bert_whitening.vectors import NORM_TOLERANCE, check_vectors

logger = logging.getLogger(__name__)

#: 2: texts, whitening and checksums in the directory. 1 (no ``format_version``) read the corpus
#: files again at search time; it is refused with a request to rebuild.
FORMAT_VERSION = 2
INDEX_FILE, KEYS_FILE, TEXTS_FILE = "index.faiss", "keys.tsv", "texts.jsonl"
WHITENING_FILE, FLOW_FILE, RECORD_FILE = "whitening.npz", "flow.npz", "index.json"
#: The float32 unit vectors an index of codes rescores its candidates with.
VECTORS_FILE = "vectors.npy"
#: What ``index.json`` holds besides the encoder record (`bert_whitening.config.RECORD`); an index
#: written before codes has no ``codes`` (float32), ``bytes_per_vector`` or ``rescore``.
RECORD = Schema(
    required={"count": int, "dim": int, "files": dict, "index": str},
    optional={"codes": str, "bytes_per_vector": int, "rescore": (int, type(None))},
)
#: The candidates an index of codes rescores per query unless told: sentence-transformers'
#: ``semantic_search_faiss`` rescores 4 x top_k, which at its default top_k of 10 is 40.
RESCORE = 100
#: The float32 rows one step of rescoring gathers at most: a search of many queries rescores
#: them a slice at a time, so its memory does not grow with the number of queries.
RESCORE_CHUNK_BYTES = 32 * 2**20
#: The longest row of ``keys.tsv`` or ``texts.jsonl``, without its line end: the text of an input
#: line (at most `LINE_BYTES`) as JSON, where a control character takes six bytes (``\u0001``); a
#: key's file name is far shorter. A longer row is refused at opening, before any is read, and
#: `IndexWriter` writes none.
ROW_BYTES = 6 * LINE_BYTES + len('""')


def shown_name(path):
    """``path`` as keys record it: text that can be written and printed whatever bytes the file
    name holds (undecodable bytes as ``\\xNN``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@dataclasses.dataclass(frozen=True)
class IndexOptions:
    """How an index directory is written, checked once when built: ``hnsw_m`` (0: an exact
    ``IndexFlatIP``; else HNSW's neighbours per node, `check_hnsw_m`), ``batch_size`` (sentences
    per forward pass, when the index encodes them), ``overwrite`` (replace an existing
    directory), ``codes`` (`bert_whitening.codes.CODES`: float32 searches the vectors; binary or
    int8 searches their codes exactly and keeps the vectors on disk) and ``rescore`` (with codes:
    the nearest candidates by codes whose exact cosines rank a query's hits; at least its top_k
    are). ``index``, `bert_whitening.retrieval.search.build_index`, `IndexWriter` and
    `bert_whitening.SentenceEncoder.index` take one."""

    hnsw_m: int = 0
    batch_size: int = 128
    overwrite: bool = False
    codes: str = "float32"
    rescore: int = RESCORE

    def __post_init__(self):
        check_hnsw_m(self.hnsw_m, allow_flat=True)
        object.__setattr__(self, "batch_size", positive_int(self.batch_size, "batch_size"))
        object.__setattr__(self, "overwrite", boolean(self.overwrite, "overwrite"))
        check_codes(self.codes)
        object.__setattr__(self, "rescore", positive_int(self.rescore, "rescore"))
        if self.hnsw_m and self.codes != "float32":
            raise BertWhiteningError(
                "an index of %s codes is searched exactly: give hnsw_m 0 (--hnsw-m 0), or codes float32" % self.codes
            )


def index_quantizer(codes, dim, whitening=None, n_components=0):
    """The `bert_whitening.codes.Quantizer` of an index's ``codes`` (None for float32): int8 takes
    its steps from the ``whitening`` the index stores (at its ``n_components``), so one without is
    refused; binary needs none. The writer and the reader call it alike."""
    if check_codes(codes) == "float32":
        return None
    if codes == "int8":
        if whitening is None or not n_components:
            raise BertWhiteningError(
                "int8 codes take their scales from the whitening an index stores: give a whitening and "
                "n_components > 0 (--whitening, --n-components), or choose binary codes"
            )
        return whitening.quantizer(n_components, codes, allow_rank_deficient=True)
    return quantizer(codes, dim)


def rescored(queries, found, rows, top_k):
    """``(scores, ids)`` of the ``top_k`` of each query's candidates ``found`` (ids, ``(n, m)``)
    by the exact cosine of the query with their ``rows`` (``(n, m, dim)`` unit vectors), best
    first, ties by lower id: the rescoring of an index of codes."""
    scores = np.einsum("qd,qmd->qm", np.asarray(queries, np.float32), np.asarray(rows, np.float32))
    order = np.lexsort((found, -scores), axis=1)[:, :top_k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(found, order, axis=1)


class IndexWriter:
    """Builds an index directory in a staging directory and renames it into place on success,
    so a failure leaves nothing at ``output``. Rows are added in chunks with their
    ``(file, line)`` keys and texts, so a corpus of any size streams through."""

    def __init__(
        self, output, record, dim, options=IndexOptions(), whitening=None, source="the input", flow=None, inputs=()
    ):
        """``record``: `EncoderConfig.to_config()` of what made the vectors; ``options``: an
        `IndexOptions` (its ``hnsw_m`` and ``overwrite``); ``whitening`` or ``flow``: the
        `Whitening` or `Flow` in it, stored beside; ``source`` names the input in errors;
        ``output`` is checked against ``inputs`` and may exist only with ``overwrite``
        (`check_output_directory`)."""
        options_of(IndexOptions, options)
        hnsw_m, overwrite = options.hnsw_m, options.overwrite
        self.quantizer = index_quantizer(options.codes, dim, whitening, record["n_components"])
        check_output_directory(output, inputs, overwrite)
        self.output, self.record, self.dim, self.hnsw_m, self.overwrite = output, record, dim, hnsw_m, overwrite
        self.whitening, self.flow, self.source, self.options = whitening, flow, source, options
        if self.quantizer is not None:
            self.index = code_index(self.quantizer)
        else:
            self.index = hnsw_index(dim, hnsw_m) if hnsw_m else faiss().IndexFlatIP(dim)

    def __enter__(self):
        self._open = contextlib.ExitStack()  # what __exit__ closes, the staging last
        self.staging = self._open.enter_context(staged_directory(self.output))
        self.keys, self.texts = (
            self._open.enter_context(open(os.path.join(self.staging, name), "w", encoding="utf-8", newline="\n"))
            for name in (KEYS_FILE, TEXTS_FILE)
        )
        self.vectors = None
        if self.quantizer is not None:
            self.vectors = NpyRowWriter(os.path.join(self.staging, VECTORS_FILE), self.dim)
            self._open.push(self._close_vectors)  # closed by __exit__ on success, by this on a failure
        return self

    def _close_vectors(self, kind, error, traceback):
        if kind is not None:
            self.vectors.__exit__(kind, error, traceback)

    def add(self, vectors, keys, texts=None, stages=()):
        """Add ``vectors`` (unit rows) with their ``[(file, line)]`` keys and texts (None: none);
        ``stages``: what computed them, when this package did (`check_vectors`), else they are
        the caller's. They are checked as given, before the index's float32: a float64 row of
        1e40 becomes inf there, one of 1e-300 zero, and either would be blamed on what it is not."""
        vectors = vector_array(vectors, self.source)
        if vectors.shape[1] != self.dim:
            self._refuse_dimension(vectors.shape[1])
        if len(keys) != len(vectors):
            raise BertWhiteningError("%d keys for %d vectors" % (len(keys), len(vectors)))
        check_vectors(vectors, self.source, normalized=True, keys=keys, stages=stages)
        self._check_memory(self.index.ntotal + len(vectors))
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        for (path, line), text in zip(keys, texts or [None] * len(keys), strict=True):
            key_row = "%s\t%d" % (shown_name(path).replace("\t", "\\t").replace("\n", "\\n"), line)
            text_row = json.dumps(text, ensure_ascii=False)
            size = len(text_row.encode("utf-8"))  # a key row (a path and a number) is far shorter
            if size > ROW_BYTES:  # the index would be refused when read
                raise DataError(
                    "%s:%d: its %s row would take %d bytes, more than an index reads (%d)"
                    % (shown_name(path), line, TEXTS_FILE, size, ROW_BYTES)
                )
            self.keys.write(key_row + "\n")
            self.texts.write(text_row + "\n")
        if self.quantizer is None:
            self.index.add(vectors)
        else:
            add_codes(self.index, self.quantizer, vectors)
            self.vectors.append(vectors)

    def _check_memory(self, rows):
        """Refuse, before it is added, a block that would take the index (held in memory until
        it is written) past the memory this process may use (`check_memory`): its float32
        vectors, and an HNSW graph's 2 M neighbour ids of 4 bytes a row on its lowest level. A
        stream's size is not known before it is read, so the refusal comes at the block that does
        not fit, in one line (the staging removed), not from the kernel's OOM killer. An index of
        codes holds its codes alone (its vectors are written to disk as they come)."""
        needs = {"of float32 vectors of dimension %d" % self.dim: 4 * rows * self.dim}
        if self.quantizer is not None:
            needs = {"of %s codes of dimension %d" % (self.quantizer.codes, self.dim): self.quantizer.bytes * rows}
        if self.hnsw_m:
            needs["of HNSW links (M %d)" % self.hnsw_m] = 4 * 2 * self.hnsw_m * rows
        check_memory(
            "%s: an index of %d vectors" % (self.source, rows),
            needs,
            DataError,
            "index fewer sentences at a time, or keep fewer dimensions (--n-components)",
        )

    def _refuse_dimension(self, found):
        """Refuse vectors of dimension ``found``, not this index's, naming their input, what the
        encoder options give and, where a whitening gives ``found``, the options that would:
        vectors indexed with the options of others (whitened ones without ``--whitening``,
        another k) are the likely mistake, and the input is at fault, not a corpus line."""
        model, k = self.record["model"], self.record["n_components"]
        given = "n_components %d" % k if k else "with a flow" if self.flow is not None else "not whitened"
        hint = ""
        if found < model["hidden_size"] and self.flow is None:
            hint = (
                ": give the --n-components %d they were made with" % found
                if k
                else ": whitened vectors? give the --whitening FILE.npz and --n-components %d they were made with"
                % found
            )
        raise DataError(
            "%s: vectors of dimension %d, but the encoder options give %d (%s, %s)%s"
            % (self.source, found, self.dim, model["name"], given, hint)
        )

    def __exit__(self, kind, error, traceback):
        """Close the files and, without an error, write the rest and put the directory in place;
        any failure here (a full disk at the last flush, say) goes through the staging too, which
        removes it and names the output."""
        try:
            if kind is None:
                self.keys.close()
                self.texts.close()
                if self.vectors is not None:
                    self.vectors.close()
                if self.index.ntotal == 0:
                    raise DataError("%s: no vectors to index" % self.source)
                self._write()
        except BaseException as failure:
            self._open.__exit__(type(failure), failure, failure.__traceback__)  # raises it, named
            raise
        return self._open.__exit__(kind, error, traceback)

    def _write(self):
        binary = self.quantizer is not None and self.quantizer.codes == "binary"
        with open(os.path.join(self.staging, INDEX_FILE), "wb") as stream:  # Python's errors, not FAISS's
            (faiss().write_index_binary if binary else faiss().write_index)(
                self.index, faiss().PyCallbackIOWriter(stream.write)
            )
        names = [INDEX_FILE, KEYS_FILE, TEXTS_FILE] + ([VECTORS_FILE] if self.quantizer is not None else [])
        for name, fitted in ((WHITENING_FILE, self.whitening), (FLOW_FILE, self.flow)):
            if fitted is not None:
                with open(os.path.join(self.staging, name), "wb") as stream:
                    fitted.write(stream)
                names.append(name)
        metadata = {
            **self.record,
            "count": int(self.index.ntotal),
            "dim": self.dim,
            "index": "hnsw" if self.hnsw_m else "flat",
            "hnsw_m": self.hnsw_m or None,
            "codes": self.options.codes,
            "bytes_per_vector": bytes_per_vector(self.options.codes, self.dim),
            "rescore": self.options.rescore if self.quantizer is not None else None,
            "format_version": FORMAT_VERSION,
            "files": {name: file_sha256(os.path.join(self.staging, name)) for name in names},
            "versions": versions(),
        }
        with open(os.path.join(self.staging, RECORD_FILE), "w", encoding="utf-8") as stream:
            json.dump(metadata, stream, indent=2, ensure_ascii=False)
        publish_directory(self.staging, self.output, overwrite=self.overwrite)


class IndexDirectory:
    """An index directory, verified (see the module docstring) when opened: ``metadata`` is
    ``index.json`` (with the encoder record, `EncoderConfig.from_config` reads it), ``count``
    and ``dim`` its rows and their dimension.

    The directory is opened once, and every file through it, at opening (`CheckedFile`): what is
    read later is read from those descriptors, so an index renamed over this one, or a file
    renamed over one of its files, while a command runs cannot mix two indexes; content written
    over in place is refused when it is read."""

    def __init__(self, directory):
        self.directory = directory
        descriptor = open_directory(directory)
        try:
            self.metadata = self._read_metadata(descriptor)
            hidden = self.metadata["model"]["hidden_size"]
            read_whole = {  # the most each file read whole can hold: a whitening of the model's hidden size, a flow
                WHITENING_FILE: (whitening_file_bytes(hidden), "a whitening of dimension %d" % hidden),
                FLOW_FILE: (FLOW_FILE_BYTES, "a flow"),
            }

            def checked(name, lines=None):
                return CheckedFile(
                    descriptor,
                    name,
                    self.metadata["files"][name],
                    directory,
                    RECORD_FILE,
                    "this index was built with",
                    read_whole.get(name),
                    lines,
                )

            rows = (KEYS_FILE, TEXTS_FILE)
            self._files = {name: checked(name) for name in self.metadata["files"] if name not in rows}
            self.count, self.dim = self.metadata["count"], self.metadata["dim"]
            self.codes = self.metadata.get("codes", "float32")
            self.bytes_per_vector = bytes_per_vector(self.codes, self.dim)
            self.rescore = self.metadata.get("rescore")
            index_file = self._files[INDEX_FILE]
            try:
                self._checked_layout = check_index_layout(
                    index_file.read_at, index_file.size, self.metadata["index"], self.count, self.dim, self.codes
                )
            except DataError as error:
                self._refuse("%s %s" % (INDEX_FILE, error))
            self._rescored = self._mapped_vectors() if self.codes != "float32" else None
            # index.faiss holds count vectors: where each row starts is kept for at most that many
            self._files.update((name, checked(name, self.count)) for name in rows)
        finally:
            os.close(descriptor)
        for name in rows:
            found = self._files[name].lines
            if found != self.count:
                self._refuse("%s holds %d rows; index.json says %d" % (name, found, self.count))
            longer = np.flatnonzero(self._files[name].line_lengths() > ROW_BYTES)
            if longer.size:
                self._refuse(
                    "%s line %d is longer than %d bytes, more than an index row holds"
                    % (name, longer[0] + 1, ROW_BYTES)
                )
        self._index = self._quantizer = None

    def _mapped_vectors(self):
        """``vectors.npy``, refused unless a float32 array of ``count`` x ``dim`` rows and nothing
        else, mapped from its checked descriptor (`CheckedFile.mapped`)."""
        file = self._files[VECTORS_FILE]
        stream = io.BytesIO(file.read_at(0, NPY_HEADER_BYTES + 12))
        try:
            shape, fortran, dtype = npy_header(stream)
        except HEADER_ERRORS as error:
            self._refuse("%s is not a .npy array (%s)" % (VECTORS_FILE, error))
        expected = (self.count, self.dim)
        if tuple(shape) != expected or fortran or dtype != np.dtype("<f4"):
            self._refuse(
                "%s holds %s %s%s; index.json says float32 %s"
                % (VECTORS_FILE, dtype, shape, " in Fortran order" if fortran else "", expected)
            )
        offset = stream.tell()
        if file.size != offset + 4 * self.count * self.dim:
            self._refuse(
                "%s has %d bytes, not the %d of its header and rows"
                % (VECTORS_FILE, file.size, offset + 4 * self.count * self.dim)
            )
        return file.mapped(offset, np.float32, expected)

    def _refuse(self, problem):
        raise DataError("%s: %s" % (self.directory, problem))

    def _read_metadata(self, descriptor):
        text = read_limited_at(descriptor, RECORD_FILE, JSON_BYTES, self.directory)
        where = os.path.join(self.directory, RECORD_FILE)
        metadata = parse_record(text, None, where, DataError)
        if "format_version" not in metadata:
            self._refuse(
                "built by an earlier version, which read the corpus files again at search "
                "time; build it again with `bert-whitening index`"
            )
        if metadata["format_version"] != FORMAT_VERSION:
            self._refuse(
                "index format version %r; this version reads %d" % (metadata["format_version"], FORMAT_VERSION)
            )
        check_fields(metadata, RECORD, where, DataError)
        if metadata["count"] < 1 or metadata["dim"] < 1:
            self._refuse(
                "%s: count %d, dim %d: an index holds at least one vector"
                % (RECORD_FILE, metadata["count"], metadata["dim"])
            )
        expected = {INDEX_FILE, KEYS_FILE, TEXTS_FILE} | (
            {VECTORS_FILE} if metadata.get("codes", "float32") != "float32" else set()
        )
        expected |= {name for name, key in ((WHITENING_FILE, "whitening"), (FLOW_FILE, "flow")) if metadata.get(key)}
        if set(metadata["files"]) != expected:
            self._refuse("%s lists files %s, expected %s" % (RECORD_FILE, sorted(metadata["files"]), sorted(expected)))
        try:
            checked_record(metadata)
        except BertWhiteningError as error:
            self._refuse("%s: %s" % (RECORD_FILE, error))
        self._check_written_by_us(metadata)
        return metadata

    def _check_written_by_us(self, metadata):
        """Refuse a record no index `IndexWriter` writes has, before anything relies on it: an
        unknown kind of index, an M where it means nothing or none where it does, vectors not
        L2-normalised (their inner products, printed as cosines, would not be), or a dimension
        other than the one its encoder gives (a query of that encoder would then stop FAISS or
        TensorFlow with a traceback)."""
        kind, m = metadata["index"], metadata.get("hnsw_m")
        if kind not in FOURCC:
            self._refuse("%s: 'index' is %r, expected one of %s" % (RECORD_FILE, kind, ", ".join(FOURCC)))
        if kind == "hnsw" and not (type(m) is int and m >= 1):
            self._refuse("%s: 'hnsw_m' is %r, expected a positive integer for an HNSW index" % (RECORD_FILE, m))
        if kind == "flat" and m is not None:
            self._refuse("%s: 'hnsw_m' is %r, expected null for a flat index" % (RECORD_FILE, m))
        if metadata.get("normalize") is not True:
            self._refuse(
                "%s: 'normalize' is %r, expected true: an index holds L2-normalised vectors"
                % (RECORD_FILE, metadata.get("normalize"))
            )
        hidden = metadata["model"]["hidden_size"]  # at most MODEL_SIZES': checked_record
        k = metadata["n_components"]
        if bool(metadata["whitening"]) != (k > 0):
            self._refuse(
                "%s: 'n_components' is %d %s a whitening: a whitened index keeps k > 0 dimensions, another 0"
                % (RECORD_FILE, k, "with" if metadata["whitening"] else "without")
            )
        encoded = k or hidden
        if metadata["dim"] != encoded:
            self._refuse(
                "%s: 'dim' is %d, but its encoder gives vectors of dimension %d (%s)"
                % (RECORD_FILE, metadata["dim"], encoded, "n_components" if k else "the model's hidden size")
            )
        self._check_codes(metadata)

    def _check_codes(self, metadata):
        """Refuse codes no `IndexWriter` writes: unknown ones, HNSW over codes, int8 without the
        whitening that scales them, a ``bytes_per_vector`` other than the codes' or a
        ``rescore`` that is not a positive count (or not null for float32)."""
        codes, rescore = metadata.get("codes", "float32"), metadata.get("rescore")
        if codes not in CODES:
            self._refuse("%s: 'codes' is %r, expected one of %s" % (RECORD_FILE, codes, ", ".join(CODES)))
        if codes != "float32" and metadata["index"] != "flat":
            self._refuse("%s: an index of %s codes is flat, not %r" % (RECORD_FILE, codes, metadata["index"]))
        if codes == "int8" and not metadata["whitening"]:
            self._refuse("%s: int8 codes without the whitening that scales them" % RECORD_FILE)
        size = bytes_per_vector(codes, metadata["dim"])
        if metadata.get("bytes_per_vector", size) != size:
            self._refuse(
                "%s: 'bytes_per_vector' is %d, but %s codes of dimension %d take %d"
                % (RECORD_FILE, metadata["bytes_per_vector"], codes, metadata["dim"], size)
            )
        if (codes == "float32") != (rescore is None) or (rescore is not None and rescore < 1):
            self._refuse(
                "%s: 'rescore' is %r, expected %s"
                % (RECORD_FILE, rescore, "null" if codes == "float32" else "a count >= 1")
            )

    @property
    def index(self):
        """The FAISS index, read from the checked descriptor once: the layout of the bytes it reads
        was checked at opening (`check_index_layout`: index.json's kind, count and dimension) and
        must still be the one checked as FAISS reads it (`read_as_checked`), `CheckedFile.reading`
        refuses the rest if it changed since, and an HNSW graph must have index.json's M
        (`check_graph_m`)."""
        if self._index is None:
            size = self._files[INDEX_FILE].size
            check_memory("%s: reading %s" % (self.directory, INDEX_FILE), {"of its FAISS index": size}, DataError)
            read = faiss().read_index_binary if self.codes == "binary" else faiss().read_index
            with self._files[INDEX_FILE].reading() as stream:
                try:
                    index = read(faiss().PyCallbackIOReader(read_as_checked(stream.read, self._checked_layout)))
                except RuntimeError as error:
                    self._refuse("FAISS cannot read %s (%s)" % (INDEX_FILE, faiss_reason(error)))
                except DataError as error:
                    self._refuse("%s %s" % (INDEX_FILE, error))
            if self.metadata["index"] == "hnsw":
                try:
                    check_graph_m(index, self.metadata["hnsw_m"])
                except DataError as error:
                    self._refuse("%s %s" % (INDEX_FILE, error))
            self._index = index
        return self._index

    def whitening(self):
        """The `Whitening` stored with the index, or None."""
        from bert_whitening.whitening import Whitening

        return Whitening.load(self._files[WHITENING_FILE].read()) if self.metadata.get("whitening") else None

    def flow(self):
        """The `Flow` stored with the index, or None."""
        if not self.metadata.get("flow"):
            return None
        from bert_whitening.flow import Flow

        return Flow.load(self._files[FLOW_FILE].read())

    def vectors(self):
        """The exact vectors stored, float32 ``(count, dim)``: an index of codes's from
        ``vectors.npy``, each row checked a unit vector."""
        if self._rescored is None:
            return self.index.reconstruct_n(0, self.count)
        return self._checked_rows(np.array(self._rescored))

    def quantizer(self):
        """The `bert_whitening.codes.Quantizer` of the codes searched (None for float32)."""
        if self._quantizer is None and self.codes != "float32":
            self._quantizer = index_quantizer(self.codes, self.dim, self.whitening(), self.metadata["n_components"])
        return self._quantizer

    def search(self, vectors, top_k, rescore=None):
        """``(scores, ids)`` of the ``top_k`` nearest rows (at most ``count``) of each vector, best
        first. An index of codes takes the ``rescore`` (None: its record's; at least ``top_k``)
        nearest rows by codes (`candidates`) and ranks them by the exact cosine of their float32
        vectors, ties by lower row: the scores are those cosines."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        top_k = min(top_k, self.count)
        if self._rescored is None:
            return self.index.search(vectors, top_k)
        wanted = max(top_k, positive_int(self.rescore if rescore is None else rescore, "rescore"))
        found = candidates(self.index, self.quantizer(), vectors, min(wanted, self.count))
        step = max(1, RESCORE_CHUNK_BYTES // max(1, 4 * self.dim * found.shape[1]))
        parts = []
        for at in range(0, max(len(found), 1), step):
            ids = found[at : at + step]
            parts.append(rescored(vectors[at : at + step], ids, self._checked_rows(self._rescored[ids]), top_k))
        return tuple(np.concatenate(part) for part in zip(*parts, strict=True))

    def _checked_rows(self, rows):
        """``rows`` of ``vectors.npy`` if each is a finite unit vector, as written; else refused as
        changed since its check (the file is mapped, not hashed again)."""
        flat = rows.reshape(-1, self.dim)
        norms = np.sqrt(np.einsum("ij,ij->i", flat, flat))
        if not np.all(np.abs(norms - 1) <= NORM_TOLERANCE):
            self._refuse(
                "%s changed after it was checked against %s: a row is not a unit vector" % (VECTORS_FILE, RECORD_FILE)
            )
        return rows

    def rows(self, wanted):
        """``{row: (file, line, text)}`` for the set of ``wanted`` rows, each read alone from the
        keys and the texts (`CheckedFile.line`: a search needs a few rows of a large index)."""
        return {
            row: self._row(row, self._files[KEYS_FILE].line(row), self._files[TEXTS_FILE].line(row))
            for row in sorted(wanted)
        }

    def _row(self, row, key, text):
        fields = key.decode("utf-8", "replace").rstrip("\n").rsplit("\t", 1)
        try:
            file, line = fields[0], int(fields[1])
        except (IndexError, ValueError):
            self._refuse("%s line %d: expected file<TAB>line" % (KEYS_FILE, row + 1))
        try:
            parsed = parse_json(text, TEXTS_FILE, DataError)
        except DataError:
            parsed = text  # the line's bytes: refused below, as a number or a list would be
        if parsed is not None and not isinstance(parsed, str):
            self._refuse("%s line %d: expected a JSON string or null" % (TEXTS_FILE, row + 1))
        return file, line, parsed
