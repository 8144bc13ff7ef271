import pytest

from tablegen_tf.config import CORPORA, deep_merge, load_config, parse_overrides


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
    from tablegen_tf.models import build_model

    config = load_config(corpus, ["model.hidden_size=8", "model.word_dim=4", "model.value_dim=4"])
    assert config["model"]["max_position"] == config["data"]["max_position"]
    assert config["decode"]["beam_size"] >= 1 and config["train"]["optimizer"]["name"] == "adam"
    model = build_model(None, config, {"words": 20, "fields": 5, "entities": 5, "groups": 4})
    assert model.hidden_size == 8 and model.name == config["model"]["name"].replace("-", "_")


def test_corpus_values_override_defaults():
    e2e, rotowire = load_config("e2e"), load_config("rotowire")
    assert e2e["model"]["num_layers"] == 1 and e2e["model"]["hidden_size"] == 256
    assert rotowire["train"]["tbptt"] == {"t1": 100, "t2": 100}
    assert load_config()["train"]["tbptt"] is None
