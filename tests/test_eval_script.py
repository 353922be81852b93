"""``eval/eval.py`` chooses its model: ``minilm`` is the built-in all-MiniLM-L6-v2, with no
--model-root (the README's block for it could not run: every MODEL_TYPE needed a checkpoint)."""

import pytest

from bert_whitening.errors import DataError

from helpers import original_eval_script


@pytest.fixture
def script(monkeypatch):
    """eval.py with `evaluate_tasks` stopped at once, the configuration it was given kept."""
    module = original_eval_script()
    given = []

    def stop(spec, *arguments, **options):
        given.append(spec)
        raise DataError("stopped before encoding")

    monkeypatch.setattr(module, "evaluate_tasks", stop)
    monkeypatch.delenv(module.MODELS_ENV, raising=False)
    return module, given


def test_minilm_is_the_built_in_model_and_needs_no_model_root(script, capsys):
    module, given = script
    assert module.main(["minilm", "first-last-avg", "STS-B", "-1", "--data-dir", "somewhere"]) == 1
    (spec,) = given
    assert (spec.model, spec.model_type, spec.pooling, spec.maxlen) == ("minilm", "bert", "first-last-avg", None)
    assert "error: stopped before encoding" in capsys.readouterr().err


def test_a_checkpoint_type_still_needs_its_root(script, capsys, tmp_path):
    module, given = script
    with pytest.raises(SystemExit):
        module.main(["BERT", "cls", "STS-B", "4"])
    assert "give --model-root DIR or set BERT_WHITENING_MODELS (or MODEL_TYPE minilm" in capsys.readouterr().err
    assert module.main(["RoBERTa", "cls", "STS-B", "4", "--model-root", str(tmp_path)]) == 1
    assert [(spec.model, spec.model_type) for spec in given] == [
        (str(tmp_path / "chinese_roberta_wwm_ext_L-12_H-768_A-12"), "roberta")
    ]
