"""benchmarks/draw_combination.py: MBR over several systems' cached beams and draws."""

import dataclasses
import os
import sys

import numpy as np
import pytest

from trainer_test import data_dir, tiny_config  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import draw_combination  # noqa: E402

DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")


def system(beams, scores, errors, samples):
    """One table's cache: beams' texts, scores, slot errors; draws."""
    return {"texts": np.array([beams], object), "scores": np.array([scores], np.float32),
            "errors": np.array([errors], np.int32), "sample_texts": np.array([samples], object)}


def test_another_systems_draws_and_beams_change_the_choice():
    first = system(["the eagle is a pub", "the eagle is a coffee shop"], [-1.0, -1.2], [0, 0],
                   ["the eagle is a pub"] * 2)
    second = system(["a coffee shop the eagle", "the eagle is a coffee shop ."], [-1.1, -1.3], [0, 0],
                    ["the eagle is a coffee shop ."] * 6)
    assert draw_combination.choose([first], slot_weight=20, mbr_weight=50) == ["the eagle is a pub"]
    # pooled: six of the eight draws say "coffee shop", so a coffee-shop beam wins
    assert draw_combination.choose([first, second], slot_weight=20, mbr_weight=50) == ["the eagle is a coffee shop ."]
    # the second system's draws alone (its beams are no candidates) tip the first one's choice
    assert draw_combination.choose([first], slot_weight=20, mbr_weight=50,
                                   witnesses=[second]) == ["the eagle is a coffee shop"]
    # the model scores alone: the best-scored beam of either system
    assert draw_combination.choose([first, second], slot_weight=0, mbr_weight=0) == ["the eagle is a pub"]


def test_slot_errors_outweigh_agreement_with_the_draws():
    table = system(["the eagle is a pub", "the eagle"], [-1.0, -0.5], [0, 1], ["the eagle"] * 4)
    assert draw_combination.choose([table], slot_weight=0, mbr_weight=1) == ["the eagle"]
    assert draw_combination.choose([table], slot_weight=20, mbr_weight=1) == ["the eagle is a pub"]


def test_dead_beams_are_never_chosen():
    table = system(["", "the eagle is a pub"], [-np.inf, -3.0], [0, 0], ["", ""])
    assert draw_combination.choose([table], slot_weight=20, mbr_weight=50) == ["the eagle is a pub"]


def test_a_draw_as_a_candidate_is_not_its_own_evidence():
    # one beam and three draws: two draws say "coffee shop", one says "pub"
    table = system(["the eagle is a pub"], [-1.0], [0],
                   ["the eagle is a coffee shop", "the eagle is a coffee shop", "the eagle is a pub"])
    table.update(sample_scores=np.array([[-3.0, -3.0, -1.0]], np.float32), sample_errors=np.array([[0, 0, 0]], np.int32))
    utility = np.array([[1.0, 0.5, 0.5], [0.5, 1.0, 0.5], [0.5, 0.5, 1.0]])
    # each draw's mean leaves its own column out: (0.5 + 0.5) / 2, not (1 + 0.5 + 0.5) / 3
    assert np.allclose(draw_combination._mean_leaving_out_self(utility, 3), [0.5, 0.5, 0.5])
    assert draw_combination.choose([table], slot_weight=20, mbr_weight=50) == ["the eagle is a pub"]
    # MBR alone: a coffee-shop draw agrees with the other coffee-shop draw, the pub texts only with themselves
    assert draw_combination.choose([table], slot_weight=20, mbr_weight=50, draw_candidates=True,
                                   score_weight=0) == ["the eagle is a coffee shop"]


@pytest.mark.slow
def test_the_cached_best_beam_is_what_the_graphs_search_returns(data_dir, tmp_path):  # noqa: F811
    """The cache's beams are the graph's: its best-scored beam (M 0, W 0) is decode_text's
    text at the same beam and end gate, and every table has its draws."""
    from tablegen_tf.generation import decode_text
    from tablegen_tf.inference import build, read_inputs
    from tablegen_tf.training.trainer import Trainer, load_trained

    out = str(tmp_path / "run")
    Trainer(tiny_config(data_dir, max_steps=12), out).train(progress=False)
    trained = load_trained(out)
    raws, _ = read_inputs("e2e", DEVSET, "valid")
    examples = build(raws, trained.config.tokenizer, needs_text=True)[0]
    cached = draw_combination.decode_system(trained, examples, beam=3, end_penalty=3.0, samples=4, epsilon=0.02,
                                            seed=1)
    assert cached["texts"].shape == (len(examples), 3) and cached["sample_texts"].shape == (len(examples), 4)
    config = dataclasses.replace(trained.config.decode, beam_size=3, slot_end_penalty=3.0, slot_rerank_weight=0.0,
                                 coverage_rerank_weight=0.0, pragmatic_alpha=0.0, mbr_weight=0.0)
    featurizer = trained.featurizer
    batch = next(iter(featurizer.ordered_batches([e.serialize() for e in examples], len(examples))))
    expected = [t.decode("utf-8") for t in decode_text(trained.model, featurizer, batch, config)[0].numpy()]
    assert draw_combination.choose([cached], slot_weight=0, mbr_weight=0) == expected
