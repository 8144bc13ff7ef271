"""order-planning end to end on a tiny model: train (with ablation YAML) -> TensorBoard
figures -> `tablegen generate` -> export -> the SavedModel in a fresh process gives the
same text as the training-side decoder."""

import glob
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from trainer_test import data_dir  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")
FULL_MODEL = os.path.join(ROOT, "tablegen_tf", "configs", "order_planning", "t3_copy_hybrid.yaml")
pytestmark = pytest.mark.slow


# The paper's full model, with model.unknown_word_slots (its unknown-word slot memory then rides
# through training, `generate` and the SavedModel's search), and with model.copy_continuation
# (its follow mass rides in the decoding state).
@pytest.fixture(scope="module", params=[[], ["model.unknown_word_slots=4"], ["model.copy_continuation=unknown"]],
                ids=["paper", "unknown-slots", "continuation"])
def trained(data_dir, tmp_path_factory, request):  # noqa: F811
    from tablegen_tf.config import load_config, parse_overrides
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path_factory.mktemp("run") / "op")
    overrides = parse_overrides([
        f"model=@{FULL_MODEL}", "model.hidden_size=8", "model.word_dim=8", "model.field_dim=4",
        "data.batch_size=4", "data.shuffle_buffer=16", "train.max_steps=6", "train.eval_every_steps=6",
        "train.checkpoint_every_steps=6", "train.log_every_steps=2", "decode.beam_size=2", "decode.max_length=8",
        f"data.train={os.path.join(data_dir, 'train')}", f"data.valid={os.path.join(data_dir, 'valid')}",
    ] + request.param)
    config = load_config("e2e", overrides)
    assert config.model.unknown_word_slots == (4 if "model.unknown_word_slots=4" in request.param else 0)
    assert config.model.copy_continuation == ("unknown" if "model.copy_continuation=unknown" in request.param else "none")
    assert config.model.name == "order-planning" and config.model.attention == "hybrid"
    Trainer(config, out).train(progress=False)
    return out


def _local_texts(run_dir):
    from tablegen_cli.main import main

    output = os.path.join(run_dir, "dev.txt")
    assert main(["generate", "--model", run_dir, "--format", "e2e", "--input", DEVSET, "--output", output]) == 0
    with open(output, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_tensorboard_holds_attention_gate_and_link_matrix_figures(trained):
    tags = set()
    for path in glob.glob(os.path.join(trained, "logs", "valid", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    assert {"hybrid_attention", "attention/table_0", "link_matrix", "bleu"} <= tags


def test_savedmodel_in_a_fresh_process_matches_generate(trained, tmp_path):
    from tablegen_tf.export import export_saved_model
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    tables = [table.serving_input() for table in raw]
    texts = _local_texts(trained)
    assert len(texts) == len(tables) and not any("<unk>" in t for t in texts)
    export_dir = str(tmp_path / "serving" / "1")
    export_saved_model(trained, export_dir)
    code = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text\n"
        "model = tf.saved_model.load(sys.argv[1])\n"
        "out = model.signatures['serving_default'](tables=tf.constant(json.loads(sys.argv[2])))\n"
        "print(json.dumps([t.decode('utf-8') for t in out['text'].numpy()]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, export_dir, json.dumps(tables)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == texts
