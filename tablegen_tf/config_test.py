import dataclasses
import json
import re

import pytest

from tablegen_tf.config import (CORPORA, Config, ConfigError, DecodeConfig, build_config, config_path, deep_merge,
                                load_config, load_run_config, parse_overrides, save_run_config)


def test_deep_merge_merges_mappings_and_replaces_the_rest():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    merged = deep_merge(base, {"a": {"c": [3], "e": None}, "d": {"x": 1}})
    assert merged == {"a": {"b": 1, "c": [3], "e": None}, "d": {"x": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # inputs untouched


def test_overrides_parse_yaml_values():
    assert parse_overrides(["model.hidden_size=128", "train.tbptt={t1: 5, t2: 10}", "model.name=ncp"]) == {
        "model": {"hidden_size": 128, "name": "ncp"}, "train": {"tbptt": {"t1": 5, "t2": 10}}}
    with pytest.raises(ValueError):
        parse_overrides(["model.hidden_size"])


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_corpus_config_loads_and_builds_its_model(corpus):
    from tablegen_tf.models import get_family

    # value_dim through the family-kind section: WebNLG's default family (order-planning) has none
    config = load_config(corpus, ["model.hidden_size=8", "model.word_dim=4", "models.encdec.value_dim=4"])
    assert config.decode.beam_size >= 1 and config.train.optimizer.name == "adam"
    family = get_family(config.model.name)
    model = family.build_model(config, {"words": 20, "fields": 5, "entities": 5, "groups": 4})
    assert model.hidden_size == 8 and model.name == config.model.name.replace("-", "_")
    if family.config_class.KIND == "encdec":  # the families with position embeddings
        assert config.model.value_dim == 4
        assert model.max_position == config.data.max_position  # one source: data.max_position


@pytest.mark.parametrize("overlay", ["e2e_pipeline_sizes", "e2e_order_planning", "e2e_transformer"])
def test_every_experiment_overlay_loads_over_its_corpus(overlay):
    config = load_config(f"e2e,experiments/{overlay}")
    assert config.train.max_steps > 0 and config.train.eval_every_steps > 0


def test_the_e2e_quality_run_overlay_is_the_papers_full_model_at_128_units():
    config = load_config("e2e,experiments/e2e_order_planning")
    full_model = load_config("e2e", [f"model=@{config_path('order_planning/t3_copy_hybrid')}"])
    assert (config.model.name, config.model.attention, config.model.copy) == (
        full_model.model.name, full_model.model.attention, full_model.model.copy)
    assert (config.model.hidden_size, config.data.max_words, config.train.max_steps) == (128, 1200, 6000)


def test_the_compression_best_overlay_validates_once_at_its_step_budget():
    # docs/compression.md "Best model, one command": best/ must be the step-3,000 model, so
    # the selection split is decoded once, at the end (no learning-rate halving, no early stop)
    base = load_config("compression")
    config = load_config("compression,experiments/compression_best")
    assert config.model.name == "fsc"
    assert (config.model.hidden_size, config.model.syntax_weight, config.train.seed) == (128, 0.5, 5)
    assert config.train.eval_every_steps == config.train.max_steps == 3000
    assert config.train.max_steps % config.train.checkpoint_every_steps == 0
    assert config.train.early_stopping_patience == 0 and config.train.eval_max_examples == 0
    # everything else is the corpus config's (shapes, tagger, decoding)
    assert (config.model.shape_dim, config.model.tagging_weight, config.model.tagger_decoding_weight) == (
        base.model.shape_dim, base.model.tagging_weight, base.model.tagger_decoding_weight)
    assert config.decode == base.decode and config.data == base.data


def test_the_compression_best_ensembles_second_member_is_the_overlay_with_seed_4():
    # docs/compression.md "Fourth round": the best model is the ensemble of the overlay's runs
    # with seed 5 (as written) and `--set train.seed=4`; nothing else may differ between them
    first = load_config("compression,experiments/compression_best")
    second = load_config("compression,experiments/compression_best", ["train.seed=4"])
    assert (first.train.seed, second.train.seed) == (5, 4)
    assert dataclasses.replace(second.train, seed=5) == first.train
    assert (second.model, second.data, second.decode) == (first.model, first.data, first.decode)


def test_corpus_values_override_the_code_defaults():
    e2e, rotowire, plain = load_config("e2e"), load_config("rotowire"), load_config()
    assert e2e.model.num_layers == 1 and e2e.model.hidden_size == 256
    assert rotowire.train.tbptt.t1 == 100 and rotowire.model.hidden_size == 600
    assert plain.train.tbptt is None and plain.decode == DecodeConfig()
    ncp = load_config("rotowire", ["model.name=ncp"])  # family-kind settings apply to ncp too
    assert ncp.model.hidden_size == 600 and ncp.model.max_plan_length == 80


@pytest.mark.parametrize("override, message", [
    ("decode.beem_size=5", "did you mean 'decode.beam_size'"),
    ("model.hiden_size=5", "did you mean 'model.hidden_size'"),
    ("trian.max_steps=5", "did you mean 'train'"),
    ("train.optimizer.learning_rat=0.1", "did you mean 'train.optimizer.learning_rate'"),
    ("model.max_plan_length=5", "unknown config key 'model.max_plan_length'"),  # an ncp key
    ("decode.beam_size=five", "decode.beam_size must be int, got str"),
    ("train.max_minutes=[1]", "train.max_minutes must be float"),
    ("model.name=encdec-cpoy", "did you mean 'encdec-copy'"),
])
def test_unknown_keys_and_wrong_types_are_errors_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config("e2e", [override])


def test_ints_are_accepted_where_floats_are_expected():
    assert load_config(None, ["train.max_minutes=2"]).train.max_minutes == 2.0


def test_run_config_round_trip(tmp_path):
    config = load_config("webnlg", ["model.name=ncp", "train.max_steps=7"])
    save_run_config(config, str(tmp_path))
    assert load_run_config(str(tmp_path)) == config


def test_run_directories_of_the_previous_format_load(tmp_path):
    """Before the registry, config.json held every family's keys in one model section."""
    old = load_config("e2e").to_dict()
    old["model"].update(max_plan_length=80, max_position=10)
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert load_run_config(str(tmp_path)).model == load_config("e2e").model


def test_a_broken_run_config_names_the_file(tmp_path):
    values = {"format": 2, **load_config("e2e").to_dict()}
    values["decode"]["beem_size"] = 3
    (tmp_path / "config.json").write_text(json.dumps(values))
    with pytest.raises(ConfigError, match="config.json.*beem_size"):
        load_run_config(str(tmp_path))


def test_config_sections_are_dataclasses_with_the_only_defaults():
    config = build_config({})
    assert isinstance(config, Config) and config.model.name == "encdec-copy"
    assert all(dataclasses.is_dataclass(getattr(config, f.name)) for f in dataclasses.fields(Config))


def test_a_pragmatic_alpha_outside_0_1_is_refused_with_the_key():
    with pytest.raises(ConfigError, match="decode.pragmatic_alpha must be between 0"):
        DecodeConfig(pragmatic_alpha=1.5)
    assert DecodeConfig(pragmatic_alpha=1.0).pragmatic_alpha == 1.0


def test_mbr_settings_out_of_range_are_refused_with_the_keys():
    for key, value, message in (("mbr_weight", -1.0, "must be >= 0, got -1.0"), ("mbr_samples", 0, "must be >= 1"),
                                ("mbr_epsilon", 1.0, "must be at least 0 and below 1, got 1.0"),
                                ("beam_size", 0, "must be >= 1"), ("parallel_searches", 0, "must be >= 1")):
        with pytest.raises(ConfigError, match=f"decode.{key} {message}"):
            DecodeConfig(**{key: value})
    assert DecodeConfig(mbr_weight=50.0, mbr_samples=8).mbr_samples == 8
    with pytest.raises(ConfigError, match="decode.mbr_references must be >= 1, got 0"):
        DecodeConfig(mbr_samples=8, mbr_references=0)
    with pytest.raises(ConfigError, match=r"decode.mbr_references must divide decode.mbr_samples \(8\), got 3"):
        DecodeConfig(mbr_samples=8, mbr_references=3)
    assert DecodeConfig(mbr_samples=64, mbr_references=8).mbr_references == 8


def test_a_beam_size_given_as_a_tensor_is_left_to_the_graphs_own_check():
    # the SavedModel's `generate` takes beam_size and max_length per request, as tensors
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def beam_of(beam):
        return dataclasses.replace(DecodeConfig(), beam_size=beam, max_length=beam).beam_size

    assert int(beam_of(tf.constant(3))) == 3


@pytest.mark.parametrize("override, message", [
    ("data.batch_size=0", "data.batch_size must be >= 1, got 0"),
    ("data.max_words=-1", "data.max_words must be >= 0, got -1"),
    ("train.eval_every_steps=0", "train.eval_every_steps must be >= 1, got 0"),
    ("train.log_every_steps=0", "train.log_every_steps must be >= 1, got 0"),
    ("train.max_steps=-5", "train.max_steps must be >= 0, got -5"),
    ("train.decay_on_plateau=1.5", "train.decay_on_plateau must be between 0 and 1, got 1.5"),
    ("train.tbptt.t1=0", "train.tbptt.t1 must be >= 1, got 0"),
])
def test_data_and_train_settings_out_of_range_are_refused_with_the_key(override, message):
    # before: a batch size of 0 or a log interval of 0 failed inside training (a modulo by zero)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("e2e", [override])
    assert load_config("e2e", ["train.max_steps=0", "data.max_words=0"]).train.max_steps == 0


@pytest.mark.parametrize("family, override, message", [
    ("encdec-copy", "model.num_layers=0", "model.num_layers must be >= 1, got 0"),
    ("encdec-copy", "model.dropout=1.0", "model.dropout must be at least 0 and below 1, got 1.0"),
    ("ncp", "model.max_plan_length=0", "model.max_plan_length must be >= 1, got 0"),
    ("order-planning", "model.fixed_gate=1.5", "model.fixed_gate must be between 0 and 1, got 1.5"),
    ("table-nlm", "model.order=1", "model.order must be >= 2, got 1"),
    ("kn", "model.discount=2", "model.discount must be between 0 and 1, got 2.0"),
    ("backbone-lm", "model.init_scale=0", "model.init_scale must be > 0, got 0.0"),
    ("seq-lm", "model.hidden_size=0", "model.hidden_size must be >= 1, got 0"),
    ("fsc", "model.samples=0", "model.samples must be >= 1, got 0"),
    ("compression-lm", "model.word_dim=-3", "model.word_dim must be >= 1, got -3"),
])
def test_model_settings_out_of_range_are_refused_by_their_familys_bounds(family, override, message):
    # before: a hidden size of 0 or a dropout of 1 failed inside Keras, after the data loaded
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [f"model.name={family}", override])


def test_every_familys_defaults_are_inside_its_bounds():
    from tablegen_tf.models.registry import family_names

    for name in family_names():
        assert load_config(None, [f"model.name={name}"]).model.name == name
