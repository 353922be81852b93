"""Encoding on the tiny checkpoint: per-batch padding, order, calls in flight, memory refusals, poolings together."""

import dataclasses
import logging
import os
import re
import threading
import time

import numpy as np
import pytest
from test_models import whitened_alone

from bert_whitening import encoding
from bert_whitening.encoding import (
    encode,
    encode_together,
    in_flight,
    statistics_and_vectors_from_files_together,
    statistics_from_files_together,
    vector_blocks_from_files,
)
from bert_whitening.errors import BertWhiteningError
from bert_whitening.flow import Flow
from bert_whitening.models import build_encoders, finish, with_whitening
from bert_whitening.names import POOLINGS
from bert_whitening.whitening import WhiteningStats

from helpers import SENTENCES, TINY_CONFIG, limit_memory_in


@pytest.mark.parametrize("pooling", POOLINGS)
def test_padding_does_not_change_a_sentence_vector(encoders, pooling):
    encoder = encoders[pooling]
    alone = np.stack([encode(encoder, [s])[0] for s in SENTENCES])
    batched = encode(encoder, SENTENCES, batch_size=len(SENTENCES))  # padded to the longest
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def test_results_come_back_in_input_order(encoders):
    encoder = encoders["first-last-avg"]
    vectors = encode(encoder, SENTENCES, batch_size=3)
    reordered = encode(encoder, SENTENCES[::-1], batch_size=4)[::-1]
    np.testing.assert_allclose(vectors, reordered, atol=1e-5)
    assert len({v.tobytes() for v in vectors}) == len(set(SENTENCES))


def test_batches_run_concurrently_with_the_vectors_of_one_at_a_time(encoders, monkeypatch):
    encoder = encoders["first-last-avg"]
    monkeypatch.setattr(encoding, "BATCHES_IN_FLIGHT", 1)
    one_at_a_time = encode(encoder, SENTENCES, batch_size=2)
    model_call = encoding.compiled(encoder.model)
    under_way, most = [0], []
    lock = threading.Lock()

    def gauged(ids, segments):
        with lock:
            under_way[0] += 1
            most.append(under_way[0])
        time.sleep(0.2 if len(most) == 1 else 0.02)  # the first batch ends after the second
        try:
            return model_call(ids, segments)
        finally:
            with lock:
                under_way[0] -= 1

    monkeypatch.setattr(encoding, "compiled", lambda model, bfloat16=False: gauged)
    monkeypatch.setattr(encoding, "BATCHES_IN_FLIGHT", 2)
    np.testing.assert_array_equal(encode(encoder, SENTENCES, batch_size=2), one_at_a_time)
    assert max(most) == 2


def test_a_batch_larger_than_memory_is_refused_before_the_model_runs(encoders, monkeypatch):
    """The activations of a call grow with sentences x maxlen (and maxlen^2 for the scores), and
    the vectors with the sentences: a batch size or a list that cannot fit is refused in one
    line, not left to the allocator; a batch larger than the input counts as the input (what is
    allocated)."""
    from bert_whitening.io import bounded

    encoder = encoders["first-last-avg"]
    encoder.config.check_encoding_memory(10**4, encoder.dim, 10**4, 2)  # about 2 GB for a tiny model: fits
    with pytest.raises(BertWhiteningError, match="^encoding 1000000000 sentences, 1000000000 a model call at maxlen"):
        encoder.config.check_encoding_memory(10**9, encoder.dim, 10**9, 2)
    calls = []
    monkeypatch.setattr(encoding, "_run_batches", lambda *arguments, **options: calls.append(1))
    ids = [encoder.tokenizer.encode(s)[0] for s in SENTENCES]
    sizes = TINY_CONFIG["intermediate_size"] + 3 * TINY_CONFIG["hidden_size"]
    call = 4 * len(ids) * encoder.maxlen * (sizes + TINY_CONFIG["num_attention_heads"] * encoder.maxlen)
    vectors = 4 * 3 * len(ids) * TINY_CONFIG["hidden_size"]
    memory = {"SC_PAGE_SIZE": 1, "SC_PHYS_PAGES": encoding.BATCHES_IN_FLIGHT * call + vectors}  # just fits
    real_sysconf = os.sysconf
    monkeypatch.setattr(bounded.os, "sysconf", lambda name: memory.get(name) or real_sysconf(name))
    with pytest.raises(BertWhiteningError, match="more than this machine's"):
        encoding.encode_ids(encoder, ids * 3, batch_size=len(ids) + 1)
    with pytest.raises(BertWhiteningError, match="more than this machine's"):
        encoding.encode_ids(encoder, ids * 3 + ids[:1], batch_size=len(ids))  # a vector more
    encoding.encode_ids(encoder, ids * 3, batch_size=len(ids))
    encoding.encode_ids(encoder, ids, batch_size=10**9)  # as many sentences as given: fits
    assert calls


def test_a_list_whose_vectors_cannot_fit_is_refused_before_it_is_tokenized(tiny_model, encoders, monkeypatch):
    """``encode`` of a list holds a float32 vector per sentence: a list whose vectors cannot fit
    is refused before the tokenizer spends its minutes on it, and so is a joint encoding of
    several poolings, counted at their dimensions side by side."""
    from bert_whitening.io import bounded
    from bert_whitening.io.bounded import MemoryLimit

    texts = ["x"] * 10**5
    monkeypatch.setattr(encoding, "tokenize", lambda *arguments: pytest.fail("tokenized"))
    monkeypatch.setattr(bounded, "usable_memory", lambda: MemoryLimit(4 * len(texts) * 24, "the {} of a test"))
    with pytest.raises(BertWhiteningError, match=r"^encoding 100001 sentences, .*dimension 24\), more than"):
        encoding.encode(encoders["cls"], texts + ["one more"], batch_size=1)
    pair = list(build_encoders(tiny_model[0], poolings=("cls", "last-avg")).values())
    with pytest.raises(BertWhiteningError, match=r"^encoding 50001 sentences, .*dimension 48\), more than"):
        encoding.encode_together(pair, texts[: len(texts) // 2 + 1], batch_size=1)


def test_in_flight_keeps_the_order_and_stops_at_an_error():
    started = []

    def call(item):
        started.append(item)
        time.sleep(0.03 * (item % 3))  # later items often finish first
        if item == 7:
            raise ValueError("item 7")
        return item * item

    results = []
    with pytest.raises(ValueError, match="item 7"):
        for result in in_flight(call, range(100), 3):
            results.append(result)
    assert results == [i * i for i in range(7)]
    assert max(started) <= 7 + 2  # 7, 8 and 9 under way when the error was seen; no call started after it
    assert list(in_flight(lambda item: item * item, range(10), 3)) == [i * i for i in range(10)]  # the last too


def test_each_call_is_sentences_of_similar_length_padded_to_the_longest_of_them(encoders, monkeypatch):
    """The point of `encode`: its sentences sorted by token count (bert4keras' own tokenizer and
    truncation here), cut into calls of ``batch_size`` in that order, each call padded to its own
    longest sentence only; the vectors float32 and back in input order."""
    encoder = encoders["cls"]
    texts = SENTENCES + ["the cat runs " * 30, "a b"]
    expected_ids = [encoder.tokenizer.encode(text, maxlen=encoder.maxlen)[0] for text in texts]
    order = sorted(range(len(texts)), key=lambda row: len(expected_ids[row]))  # sorted() is stable
    calls, model_call = [], encoding.compiled(encoder.model)

    def recorded(ids, segments):
        calls.append(ids.numpy())
        return model_call(ids, segments)

    monkeypatch.setattr(encoding, "compiled", lambda model, bfloat16=False: recorded)
    monkeypatch.setattr(encoding, "BATCHES_IN_FLIGHT", 1)  # the calls in the order they are made
    vectors = encode(encoder, texts, batch_size=5)
    expected_calls = []
    for start in range(0, len(order), 5):
        rows = order[start : start + 5]
        padded = np.zeros((len(rows), max(len(expected_ids[row]) for row in rows)), np.int32)
        for number, row in enumerate(rows):
            padded[number, : len(expected_ids[row])] = expected_ids[row]
        expected_calls.append(padded)
    assert [call.shape for call in calls] == [call.shape for call in expected_calls]
    for call, expected in zip(calls, expected_calls, strict=True):
        np.testing.assert_array_equal(call, expected)
    assert vectors.dtype == np.float32 and vectors.shape == (len(texts), encoder.dim)
    alone = np.concatenate([encode(encoder, [text]) for text in texts])
    np.testing.assert_allclose(vectors, alone, atol=1e-5)


def test_one_trace_serves_every_length_and_batch_size(encoders):
    """The model runs under one ``tf.function`` whose signature leaves batch and length free:
    sentences of other lengths, in batches of other sizes, trace nothing more."""
    encoder = encoders["last-avg"]
    for batch_size in (1, 3, 16):
        encode(encoder, SENTENCES + ["the cat runs " * 30], batch_size=batch_size)
    function = encoding.compiled(encoder.model)
    assert function is encoding.compiled(encoder.model)
    assert function.experimental_get_tracing_count() == 1


def test_a_stream_counts_its_truncated_sentences_once_at_its_end(encoders, monkeypatch, caplog):
    """Chunks of 3 sentences, the long ones in two chunks: one line for the whole stream, with
    the count bert4keras' tokenizer gives (ids longer than maxlen before the cut)."""
    encoder = encoders["cls"]
    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 3)
    texts = SENTENCES + ["the cat runs " * 30, "今天天气很好" * 20, "the dog " * 40]
    longer = sum(len(encoder.tokenizer.encode(text)[0]) > encoder.maxlen for text in texts)
    assert longer == 3
    with caplog.at_level(logging.INFO, logger="bert_whitening"):
        blocks = list(encoding.encode_stream(encoder, iter(texts)))
    assert [len(block) for block in blocks] == [3] * 6 + [1]
    assert caplog.messages == ["3 of 19 sentences were longer than maxlen 64 tokens and were truncated"]


def test_the_progress_bar_advances_once_per_sentence(encoders, capsys):
    class Bar:
        n = 0

        def update(self, done):
            self.n += done

    bar = Bar()
    encode(encoders["cls"], SENTENCES, batch_size=5, progress=bar)  # 5, 5, 5 and 1
    assert bar.n == len(SENTENCES)
    encode(encoders["cls"], SENTENCES, progress=False)
    assert capsys.readouterr().err == ""
    encode(encoders["cls"], SENTENCES, progress=True)  # a bar of its own, shown off a terminal too
    assert "sent" in capsys.readouterr().err


def test_encode_together_refuses_what_one_pass_cannot_give(encoders, together):
    cls, last = together["cls"], together["last-avg"]
    for given, why in [
        ([cls, encoders["last-avg"]], "last-avg pooling is not one of them"),  # another model's graph
        ([cls, with_whitening(last)], "last-avg pooling is not one of them"),  # normalised
        ([cls, last.with_maxlen(8)], "needs one maxlen: 64 and 8 given"),
        ([], "at least one encoder"),
        ([cls, whitened_alone(last)], "last-avg pooling is not one of them"),  # whitened, not normalised
        ([cls, flowed_alone(last)], "last-avg pooling is not one of them"),  # a flow, not normalised
    ]:
        with pytest.raises(BertWhiteningError, match=why):
            encode_together(given, SENTENCES)


def flowed_alone(encoder):
    """``encoder`` followed by a new one-step flow, not normalised: on the same inputs, so that
    only the flow keeps it out of a joint pass."""
    flow = Flow(encoder.dim, {"n_levels": 1, "depth": 1})
    flow.pooling = encoder.pooling
    return finish(encoder, dataclasses.replace(encoder.config, flow=flow))


def test_a_vector_that_is_not_a_number_is_named_by_its_file_and_line(encoders, tmp_path, monkeypatch):
    """Files read in chunks (of 3 sentences here): every vector kept, in order, and a NaN
    refused naming the file (or standard input) and the line it came from."""
    import io

    encoder = encoders["cls"]
    path = tmp_path / "sentences.txt"
    path.write_text("".join(sentence + "\n" for sentence in SENTENCES[:8]), encoding="utf-8")
    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 3)
    blocks = list(vector_blocks_from_files(encoder, [str(path)]))
    assert [len(block) for block in blocks] == [3, 3, 2]
    np.testing.assert_allclose(np.concatenate(blocks), encode(encoder, SENTENCES[:8]), atol=1e-5)
    run_batches = encoding._run_batches

    def poisoned(encoder, sequences, *rest):
        vectors = run_batches(encoder, sequences, *rest)
        if len(vectors) == 3:
            vectors[1, 4] = np.nan  # the second line of a chunk
        return vectors

    monkeypatch.setattr(encoding, "_run_batches", poisoned)
    with pytest.raises(BertWhiteningError, match=r"^%s:2: the vector holds nan \(column 4\)" % re.escape(str(path))):
        statistics_from_files_together([encoder], [str(path)])
    read_end, write_end = os.pipe()
    os.write(write_end, path.read_bytes())
    os.close(write_end)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(os.fdopen(read_end, "rb")))
    with pytest.raises(BertWhiteningError, match=r"^standard input:2: the vector holds nan"):
        statistics_from_files_together([encoder], ["-"])


def test_vectors_kept_from_files_for_several_poolings_are_counted_side_by_side(together, tmp_path, monkeypatch):
    """``eval --fit-on FILE`` with a flow keeps the files' vectors of every pooling: 8 sentences
    of two poolings of 24 columns, held and joined, take 2 x 4 x 8 x 48 bytes; a byte less is
    refused at the block that does not fit."""
    from bert_whitening.io.bounded import MemoryLimit

    path = tmp_path / "sentences.txt"
    path.write_text("".join(sentence + "\n" for sentence in SENTENCES[:8]), encoding="utf-8")
    monkeypatch.setattr(encoding, "CHUNK_SENTENCES", 3)
    chosen = [together["cls"], together["first-last-avg"]]
    limit_memory_in(monkeypatch, encoding, MemoryLimit(2 * 4 * 8 * 48 - 1, "the {} of a test"))
    with pytest.raises(BertWhiteningError, match=r"^keeping the vectors of 8 sentences .* of 48 columns, held"):
        statistics_and_vectors_from_files_together(chosen, [str(path)])
    limit_memory_in(monkeypatch, encoding, MemoryLimit(2 * 4 * 8 * 48, "the {} of a test"))
    kept = statistics_and_vectors_from_files_together(chosen, [str(path)])
    assert [vectors.shape for _, vectors in kept] == [(8, 24), (8, 24)]
    statistics_from_files_together(chosen, [str(path)] * 4)  # statistics alone keep no vector: not counted


def test_files_are_encoded_once_for_every_encoder_built_together(encoders, together, tmp_path, monkeypatch):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(sentence + "\n" for sentence in SENTENCES), encoding="utf-8")
    chosen = [together["cls"], together["first-last-avg"]]
    passes = []
    run_batches = encoding._run_batches
    monkeypatch.setattr(encoding, "_run_batches", lambda *args: passes.append(1) or run_batches(*args))
    both = statistics_and_vectors_from_files_together(chosen, [str(path)])
    stats = statistics_from_files_together(chosen, [str(path)])
    assert len(passes) == 2  # one pass over the file for each call, both poolings in it
    for encoder, (both_stats, got), accumulated in zip(chosen, both, stats, strict=True):
        assert both_stats.count == accumulated.count and np.array_equal(both_stats.scatter, accumulated.scatter)
        alone = np.concatenate(list(vector_blocks_from_files(encoders[encoder.pooling], [str(path)])))
        np.testing.assert_allclose(got, alone, atol=1e-5, err_msg=encoder.pooling)
        expected = WhiteningStats().update(alone)
        assert accumulated.count == expected.count == len(alone)
        np.testing.assert_allclose(accumulated.mean, expected.mean, atol=1e-5)
        np.testing.assert_allclose(accumulated.scatter, expected.scatter, atol=1e-4)
