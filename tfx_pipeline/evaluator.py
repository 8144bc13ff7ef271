"""The BLEU gate: scores the candidate SavedModel on the eval split and blesses it or not.

The candidate is scored through its ``serving_default`` signature (raw inputs in,
text out): what gets pushed is what gets measured. The raw inputs are rebuilt from
the examples (``serving_input()``: for tables one JSON item per field value, tokens
re-joined), the same form clients send. The baseline (latest blessed model, see
``components.LatestBlessedModelBeforeExamplesStrategy``) is re-scored on the same
examples, so a changed eval split never compares scores across different data.

Outputs: a standard ``ModelBlessing`` (custom property ``blessed`` 1/0,
``current_model_id`` for LatestBlessedModelStrategy, a BLESSED / NOT_BLESSED file,
as TFX's Evaluator writes) that Pusher accepts, and a ``ModelEvaluation`` holding
``metrics.json``, ``predictions.jsonl`` and TensorBoard scalars in ``logs/``.
"""

import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

from tfx import v1 as tfx
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # set by `import tfx`; see runner.py

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"
LOGS_DIR = "logs"
SCALARS = ("bleu", "nist", "rouge4", "rougeL", "fact_precision", "hallucination_rate", "slot_error_rate")


def decide(candidate_bleu: float, baseline_bleu: Optional[float], min_bleu: float, max_bleu_drop: float) -> Tuple[bool, str]:
    """Blessed iff BLEU >= min_bleu and (no baseline or BLEU >= baseline - max_bleu_drop)."""
    if candidate_bleu < min_bleu:
        return False, f"BLEU {candidate_bleu:.2f} < threshold {min_bleu:.2f}"
    if baseline_bleu is not None and candidate_bleu < baseline_bleu - max_bleu_drop:
        return False, f"BLEU {candidate_bleu:.2f} < baseline {baseline_bleu:.2f} - {max_bleu_drop:.2f}"
    against = "no baseline" if baseline_bleu is None else f"baseline {baseline_bleu:.2f}"
    return True, f"BLEU {candidate_bleu:.2f} >= threshold {min_bleu:.2f}, {against}"


def budget_refusal(model_uri: str) -> Optional[str]:
    """Why a model is not blessed whatever its BLEU: training stopped at the wall-time cap
    before its step budget, so the model depends on the machine's speed."""
    path = os.path.join(model_uri, "tablegen_run.json")  # written by trainer_utils.run_fn
    if not fileio.exists(path):
        return None
    with fileio.open(path) as handle:
        run = json.load(handle)
    if run.get("stopped_because") != "max_minutes" or not run.get("max_steps"):
        return None
    return (f"training hit the wall-time cap (max_minutes {run.get('max_minutes')}) at step {run.get('steps')} "
            f"of max_steps {run['max_steps']}; raise trainer.config.train.max_minutes or lower max_steps")


def read_examples(examples_artifact, split: str, example_class, max_examples: int = 0) -> List:
    """The split's examples, parsed as the model family's example form."""
    import tensorflow as tf

    uri = artifact_utils.get_split_uri([examples_artifact], split)
    files = sorted(fileio.glob(os.path.join(uri, "*")))
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if max_examples:
        dataset = dataset.take(max_examples)
    return [example_class.parse(record.numpy()) for record in dataset]


def example_class_of(saved_model_dir: str) -> type:
    """The example form the SavedModel's family reads (from its stored run config)."""
    from tablegen_tf.export import saved_model_config
    from tablegen_tf.models import get_family

    family = get_family(saved_model_config(saved_model_dir).model.name)
    return family.featurizer_class.example_class


def generate(saved_model_dir: str, inputs: Sequence[str], batch_size: int) -> List[str]:
    """serving_default over raw inputs (its one string input: tables, sources, ...)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops of the SavedModel)

    serve = tf.saved_model.load(saved_model_dir).signatures["serving_default"]
    (input_name,) = serve.structured_input_signature[1]
    texts: List[str] = []
    for start in range(0, len(inputs), batch_size):
        batch = tf.constant(list(inputs[start:start + batch_size]), tf.string)
        texts.extend(t.decode("utf-8") for t in serve(**{input_name: batch})["text"].numpy())
    return texts


def score(examples, texts: Sequence[str]) -> Dict[str, Optional[float]]:
    """inference.evaluate's scores; undefined ones (NaN: e.g. no fact stated) -> None."""
    from tablegen_tf import inference

    scores = {k: float(v) for k, v in inference.evaluate(examples, list(texts)).items()}
    return {k: (v if math.isfinite(v) else None) for k, v in scores.items()}


def write_outputs(evaluation_uri: str, metrics: Dict, examples, texts: Sequence[str], step: int) -> None:
    import tensorflow as tf

    fileio.makedirs(evaluation_uri)
    with fileio.open(os.path.join(evaluation_uri, METRICS_FILE), "w") as handle:
        handle.write(json.dumps(metrics, indent=2, sort_keys=True))
    with fileio.open(os.path.join(evaluation_uri, PREDICTIONS_FILE), "w") as handle:
        for example, text in zip(examples, texts):
            handle.write(json.dumps({"id": example.example_id, "text": text, "references": example.references}) + "\n")
    writer = tf.summary.create_file_writer(os.path.join(evaluation_uri, LOGS_DIR))
    with writer.as_default(step=step):
        for name in SCALARS:
            if metrics["candidate"].get(name) is not None:
                tf.summary.scalar(f"eval/{name}", metrics["candidate"][name])
        if metrics.get("baseline"):
            tf.summary.scalar("eval/baseline_bleu", metrics["baseline"]["bleu"])
        tf.summary.scalar("eval/blessed", float(metrics["blessed"]))
    writer.flush()


def bless(blessing, model, baseline_model, blessed: bool, message: str) -> None:
    """The ModelBlessing contract of TFX's Evaluator (Pusher, LatestBlessedModelStrategy)."""
    fileio.makedirs(blessing.uri)
    with fileio.open(os.path.join(blessing.uri, "BLESSED" if blessed else "NOT_BLESSED"), "w") as handle:
        handle.write(message)
    blessing.set_int_custom_property("blessed", int(blessed))
    blessing.set_int_custom_property("current_model_id", model.id)
    blessing.set_string_custom_property("current_model", model.uri)
    blessing.set_string_custom_property("blessing_message", message)
    if baseline_model is not None:
        blessing.set_int_custom_property("baseline_model_id", baseline_model.id)
        blessing.set_string_custom_property("baseline_model", baseline_model.uri)


@tfx.dsl.components.component
def BleuEvaluator(
    examples: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Examples],
    model: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Model],
    blessing: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.ModelBlessing],
    evaluation: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.ModelEvaluation],
    baseline_model: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.Model] = None,
    split: tfx.dsl.components.Parameter[str] = "eval",
    min_bleu: tfx.dsl.components.Parameter[float] = 0.0,
    max_bleu_drop: tfx.dsl.components.Parameter[float] = 0.0,
    max_examples: tfx.dsl.components.Parameter[int] = 0,
    batch_size: tfx.dsl.components.Parameter[int] = 64,
    code_version: tfx.dsl.components.Parameter[str] = "",
):
    """Scores candidate (and baseline) SavedModels on `split`; blesses by the BLEU gate.

    `code_version` (a hash of this scoring code) only keys the cache.
    """
    del code_version
    candidate = path_utils.serving_model_path(model.uri)
    eval_examples = read_examples(examples, split, example_class_of(candidate), max_examples)
    inputs = [e.serving_input() for e in eval_examples]
    texts = generate(candidate, inputs, batch_size)
    metrics = {"candidate": score(eval_examples, texts), "baseline": None, "split": split}
    if baseline_model is not None:
        baseline_texts = generate(path_utils.serving_model_path(baseline_model.uri), inputs, batch_size)
        metrics["baseline"] = score(eval_examples, baseline_texts)
    baseline_bleu = metrics["baseline"]["bleu"] if metrics["baseline"] else None
    blessed, message = decide(metrics["candidate"]["bleu"], baseline_bleu, min_bleu, max_bleu_drop)
    refusal = budget_refusal(model.uri)
    if refusal:
        blessed, message = False, refusal
    metrics.update(blessed=blessed, message=message, model=model.uri,
                   baseline_model=baseline_model.uri if baseline_model is not None else None)
    print(f"BleuEvaluator: {'BLESSED' if blessed else 'NOT BLESSED'}: {message}", flush=True)
    write_outputs(evaluation.uri, metrics, eval_examples, texts, step=max(examples.span, 0))
    bless(blessing, model, baseline_model, blessed, message)
