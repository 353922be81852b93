"""Index directories: a corpus's vectors, its texts and what encoded them, self-contained and
verified before use.

A directory holds:

- ``index.faiss``: the FAISS index (exact ``IndexFlatIP``, or HNSW) of the L2-normalised vectors;
- ``keys.tsv``: ``file<TAB>line`` of each row, in index order, as the file was named when it was
  indexed (shown to the user, never opened again);
- ``texts.jsonl``: the text of each row, one JSON string a line (``null`` for rows indexed from
  vectors alone);
- ``whitening.npz`` or ``flow.npz``: the whitening or the flow that made the vectors, when there
  is one;
- ``index.json``: the `bert_whitening.config.EncoderConfig` record of the encoder, the count, the
  dimension, the kind of index, and the sha256 of each file above.

Search reads nothing outside the directory, so editing, moving or deleting the corpus files later
changes nothing. Opening an index checks, before FAISS reads a byte: that every file is a regular
file (a FIFO or a device under one of these names would block or never end; a link could point
anywhere), and that its sha256 is the one ``index.json`` records, so a damaged, truncated or
swapped file (an ``index.faiss`` copied from another index of the same dimension, say) is
refused; what is read afterwards is read from the descriptors that were checked
(`IndexDirectory`). Then ``index.faiss`` must be laid out as the index ``index.json`` describes
(`bert_whitening.retrieval.faiss_indexes.check_index_layout`: kind, count, dimension, every array
within the file), still before FAISS reads it, and the keys and texts must have ``index.json``'s
row count, none longer than `ROW_BYTES` (where each line starts is taken as they are checked;
a search then reads its rows alone, from blocks that must still be the ones checked:
`CheckedFile.line`). A whitening or flow file, read whole, larger than one of the recorded
hidden size can be is refused before it is hashed. ``index.json`` is the root of this trust: its
entries are type-checked, and must describe an index `IndexWriter` writes (its kind, normalised
vectors, the dimension its encoder gives); whoever can rewrite it can rewrite the rest, but not
make a reader allocate more than the files hold.
"""

import contextlib
import dataclasses
import json
import logging
import os

import numpy as np

from bert_whitening.arguments import boolean, options_of, positive_int, vector_array
from bert_whitening.config import checked_record, versions
from bert_whitening.errors import BertWhiteningError, DataError
from bert_whitening.io.atomic import check_output_directory, publish_directory, staged_directory
from bert_whitening.io.bounded import FLOW_FILE_BYTES, JSON_BYTES, LINE_BYTES, check_memory, whitening_file_bytes
from bert_whitening.io.files import CheckedFile, file_sha256, open_directory, read_limited_at
from bert_whitening.io.records import Schema, check_fields, parse_json, parse_record
from bert_whitening.retrieval.faiss_indexes import (
    FOURCC,
    check_graph_m,
    check_hnsw_m,
    check_index_layout,
    faiss,
    faiss_reason,
    hnsw_index,
    read_as_checked,
)
from bert_whitening.vectors import check_vectors

logger = logging.getLogger(__name__)

#: 2: texts, whitening and checksums in the directory. 1 (no ``format_version``) read the corpus
#: files again at search time; it is refused with a request to rebuild.
FORMAT_VERSION = 2
INDEX_FILE, KEYS_FILE, TEXTS_FILE = "index.faiss", "keys.tsv", "texts.jsonl"
WHITENING_FILE, FLOW_FILE, RECORD_FILE = "whitening.npz", "flow.npz", "index.json"
#: What ``index.json`` holds besides the encoder record (`bert_whitening.config.RECORD`).
RECORD = Schema(required={"count": int, "dim": int, "files": dict, "index": str})
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
    per forward pass, when the index encodes them) and ``overwrite`` (replace an existing
    directory). ``index``, `bert_whitening.retrieval.search.build_index`, `IndexWriter` and
    `bert_whitening.SentenceEncoder.index` take one."""

    hnsw_m: int = 0
    batch_size: int = 128
    overwrite: bool = False

    def __post_init__(self):
        check_hnsw_m(self.hnsw_m, allow_flat=True)
        object.__setattr__(self, "batch_size", positive_int(self.batch_size, "batch_size"))
        object.__setattr__(self, "overwrite", boolean(self.overwrite, "overwrite"))


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
        check_output_directory(output, inputs, overwrite)
        self.output, self.record, self.dim, self.hnsw_m, self.overwrite = output, record, dim, hnsw_m, overwrite
        self.whitening, self.flow, self.source = whitening, flow, source
        self.index = hnsw_index(dim, hnsw_m) if hnsw_m else faiss().IndexFlatIP(dim)

    def __enter__(self):
        self._open = contextlib.ExitStack()  # what __exit__ closes, the staging last
        self.staging = self._open.enter_context(staged_directory(self.output))
        self.keys, self.texts = (
            self._open.enter_context(open(os.path.join(self.staging, name), "w", encoding="utf-8", newline="\n"))
            for name in (KEYS_FILE, TEXTS_FILE)
        )
        return self

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
        self.index.add(vectors)

    def _check_memory(self, rows):
        """Refuse, before it is added, a block that would take the index (held in memory until
        it is written) past the memory this process may use (`check_memory`): its float32
        vectors, and an HNSW graph's 2 M neighbour ids of 4 bytes a row on its lowest level. A
        stream's size is not known before it is read, so the refusal comes at the block that does
        not fit, in one line (the staging removed), not from the kernel's OOM killer."""
        needs = {"of float32 vectors of dimension %d" % self.dim: 4 * rows * self.dim}
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
                if self.index.ntotal == 0:
                    raise DataError("%s: no vectors to index" % self.source)
                self._write()
        except BaseException as failure:
            self._open.__exit__(type(failure), failure, failure.__traceback__)  # raises it, named
            raise
        return self._open.__exit__(kind, error, traceback)

    def _write(self):
        with open(os.path.join(self.staging, INDEX_FILE), "wb") as stream:  # Python's errors, not FAISS's
            faiss().write_index(self.index, faiss().PyCallbackIOWriter(stream.write))
        names = [INDEX_FILE, KEYS_FILE, TEXTS_FILE]
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
            index_file = self._files[INDEX_FILE]
            try:
                self._checked_layout = check_index_layout(
                    index_file.read_at, index_file.size, self.metadata["index"], self.count, self.dim
                )
            except DataError as error:
                self._refuse("%s %s" % (INDEX_FILE, error))
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
        self._index = None

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
        expected = {INDEX_FILE, KEYS_FILE, TEXTS_FILE}
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
            with self._files[INDEX_FILE].reading() as stream:
                try:
                    index = faiss().read_index(
                        faiss().PyCallbackIOReader(read_as_checked(stream.read, self._checked_layout))
                    )
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
        """The exact vectors stored, float32 ``(count, dim)``."""
        return self.index.reconstruct_n(0, self.count)

    def search(self, vectors, top_k):
        """``(scores, ids)`` of the ``top_k`` nearest rows (at most ``count``) of each vector."""
        return self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), min(top_k, self.count))

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
