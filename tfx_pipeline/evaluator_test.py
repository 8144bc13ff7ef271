"""The BLEU gate's decision and the JSON tables rebuilt from examples."""

import json
import os

import pytest

from tfx_pipeline import evaluator

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "e2e")


@pytest.mark.parametrize(
    "bleu, baseline, min_bleu, drop, blessed",
    [
        (30.0, None, 25.0, 0.0, True),     # no baseline: the absolute threshold alone
        (20.0, None, 25.0, 0.0, False),    # below the threshold
        (30.0, 29.0, 25.0, 0.0, True),     # better than the baseline
        (30.0, 31.0, 25.0, 0.0, False),    # worse than the baseline
        (30.0, 31.0, 25.0, 2.0, True),     # within the allowed drop
        (20.0, 10.0, 25.0, 0.0, False),    # better than the baseline, below the threshold
    ],
)
def test_decide(bleu, baseline, min_bleu, drop, blessed):
    decision, message = evaluator.decide(bleu, baseline, min_bleu, drop)
    assert decision is blessed
    assert f"{bleu:.2f}" in message


def test_json_tables_rebuild_the_raw_items():
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.tokenizer import TokenizerConfig

    tables, _ = read_inputs("e2e", os.path.join(FIXTURES, "devset.csv"), "valid")
    built, _ = build_examples(tables, TokenizerConfig())
    for example, table in built:
        items = json.loads(example.serving_input())["table"]
        assert [i["field"] for i in items] == [i.field for i in table.items]
        # Values come back tokenized (e.g. "£20-25" -> "£20 - 25"), which the serving
        # tokenizer maps to the same tokens.
        assert " ".join(i["value"] for i in items).split() == example.values


@pytest.mark.parametrize(
    "run, refused",
    [
        ({"stopped_because": "max_steps", "steps": 4000, "max_steps": 4000, "max_minutes": 12}, False),
        ({"stopped_because": "max_minutes", "steps": 2500, "max_steps": 4000, "max_minutes": 12}, True),
        ({"stopped_because": "max_minutes", "steps": 2500, "max_steps": 0, "max_minutes": 6}, False),  # time is the budget
        ({"stopped_because": "early_stopping", "steps": 3000, "max_steps": 4000, "max_minutes": 12}, False),
        (None, False),  # no run info (a model from elsewhere)
    ],
)
def test_a_model_stopped_by_the_wall_time_cap_is_not_blessed(tmp_path, run, refused):
    if run is not None:
        (tmp_path / "tablegen_run.json").write_text(json.dumps(run))
    refusal = evaluator.budget_refusal(str(tmp_path))
    assert (refusal is not None) is refused
    if refused:
        assert "wall-time cap" in refusal and "at step 2500 of max_steps 4000" in refusal
