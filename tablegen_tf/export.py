"""SavedModel export: raw inputs in, text out, everything inside the graph, for any family.

Signatures (TF Serving runs them unchanged: core TF + tensorflow-text ops only), with
INPUT the family featurizer's raw input (``tables`` for table families, ``sources``
for text-to-text families):

* ``serving_default(INPUT: string[B]) -> {text: string[B], score: float32[B]}``
  with the run's decoding config (beam size, max length, length penalty, slot reranking).
* ``generate(INPUT, beam_size: int32, max_length: int32, must_include: string[B, C])``
  decoding controls; ``must_include`` words (padded with "") are forced into the
  output by constrained beam search; words outside the vocabulary are copied from
  the input.
* ``explain(INPUT) -> {text, score, candidates, candidate_scores, tokens, copy_probability,
  copied_from, attention, source, source_field, plan, slot_attributes, slot_errors, ...}``:
  the same search as ``serving_default`` keeping every beam, and for the chosen text per
  token what the family's ``explain_tokens`` gives (tablegen_tf.generation.explain_text);
  its ``text`` is ``serving_default``'s.
* whatever the family adds (``GenerationModel.serving_signatures``).

``assets.extra/tablegen_config.json`` holds the run's merged config, so tools that
only see the SavedModel (the TFX Evaluator) know its family and example form.
``assets.extra/tf_serving_warmup_requests`` holds warm-up requests in TF Serving's format,
so a new version's first real request does not pay for graph optimisation (in TF Serving
and in ``tablegen serve``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping, Optional, Sequence

import tensorflow as tf

from tablegen_tf.constants import EXAMPLES_ASSET, WARMUP_ASSET
from tablegen_tf.generation import PARALLEL_MIN_BATCH, decode_text, explain_text

# The beam widths ``generate`` accepts: one search graph reads the width at run time
# (a graph per width made the SavedModel 5x larger and its load 3x slower); the cap
# bounds what one request may cost.
SUPPORTED_BEAMS = tuple(range(1, 11))
CONFIG_ASSET = os.path.join("assets.extra", "tablegen_config.json")
MEMBERS_ASSET = os.path.join("assets.extra", "tablegen_checkpoints.json")  # the checkpoint(s) exported
EXAMPLE_COUNT = 8  # validation tables shipped as EXAMPLES_ASSET
# Warm-up input when the run's splits are not readable at export time (a small E2E table).
BUILTIN_WARMUP_TABLE = json.dumps({"table": [
    {"field": "name", "value": "The Eagle"}, {"field": "eatType", "value": "coffee shop"},
    {"field": "food", "value": "French"}, {"field": "area", "value": "riverside"}]})


class ServingModule(tf.Module):
    def __init__(self, model, featurizer, config):
        super().__init__(name="tablegen_serving")
        # Not tracked: a tracked Keras 3 variable is saved as a tf.Variable copy that the
        # signatures do not read (keras-team/keras#20095), so TF Serving's restore op left
        # the variables they read uninitialised. `track_captured_variables` saves those.
        object.__setattr__(self, "model", model)
        self.featurizer = featurizer
        self.vocabs = featurizer.vocabs
        self.tokenizer = featurizer.tokenizer
        self.decode = config.decode
        raw = tf.TensorSpec([None], tf.string, name=featurizer.serving_input)
        self.serve = tf.function(self._serve, input_signature=[raw])
        self.explain = tf.function(self._explain, input_signature=[raw])
        self.generate = tf.function(self._generate, input_signature=[
            raw,
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.int32, name="max_length"),
            tf.TensorSpec([None, None], tf.string, name="must_include"),
        ])

    def track_captured_variables(self, options: tf.saved_model.SaveOptions) -> None:
        """Traces every signature, then tracks the tf.Variables they read (each once), the
        objects a SavedModel's checkpoint and restore op must hold for any loader.

        Traced in the save context of ``options``, the one tf.saved_model.save then opens:
        a trace's cache key holds the context's variable policy, so a trace outside it is
        traced again by save (half of an export's time)."""
        from tensorflow.python.saved_model import save_context  # no public API for this

        captured = {}
        with save_context.save_context(options):
            for function in self.signatures().values():
                for variable in function.get_concrete_function().variables:
                    captured.setdefault(id(variable), variable)
        self.captured_variables = list(captured.values())

    def signatures(self):
        """name -> tf.function; built once (a family's serving_signatures makes new
        functions on each call, which would be traced again)."""
        if "_signature_functions" not in self.__dict__:  # untracked, like `model`
            object.__setattr__(self, "_signature_functions", {
                "serving_default": self.serve, "generate": self.generate, "explain": self.explain,
                **self.model.serving_signatures(self)})
        return self._signature_functions

    def _serve(self, inputs):
        features = self.featurizer.serving_features(inputs)
        text, scores, _ = decode_text(self.model, self.featurizer, features, self.decode)
        return {"text": text, "score": tf.cast(scores, tf.float32)}

    def _explain(self, inputs):
        return explain_text(self.model, self.featurizer, self.featurizer.serving_features(inputs), self.decode)

    def _generate(self, inputs, beam_size, max_length, must_include):
        beam_size, max_length = checked_decoding_inputs(beam_size, max_length, self.model.longest_search)
        features = self.featurizer.serving_features(inputs)
        constraints, continues, unknown = self.featurizer.constraint_phrases(features, must_include)
        tf.debugging.assert_equal(tf.reduce_any(unknown), False, message=(
            "must_include: a word is neither in the vocabulary nor in the input, so no output can contain it"))
        config = dataclasses.replace(self.decode, beam_size=beam_size, max_length=max_length)
        text, scores, _ = decode_text(self.model, self.featurizer, features, config,
                                      must_include=(constraints, continues))
        return {"text": text, "score": tf.cast(scores, tf.float32)}


def checked_decoding_inputs(beam_size, max_length, longest_search=None):
    """A signature's ``beam_size`` and ``max_length`` once checked (InvalidArgumentError
    otherwise): the search reads its width at run time, so it must not start on a width
    outside SUPPORTED_BEAMS (a huge one would tile the memory that many times);
    ``longest_search``: the model's (GenerationModel.longest_search), a longer max_length
    is refused rather than cut short."""
    checks = [
        tf.debugging.assert_greater_equal(beam_size, 1, message="beam_size must be >= 1"),
        tf.debugging.assert_less_equal(beam_size, max(SUPPORTED_BEAMS),
                                       message=f"beam_size must be <= {max(SUPPORTED_BEAMS)}"),
        tf.debugging.assert_greater_equal(max_length, 1, message="max_length must be >= 1"),
    ]
    if longest_search is not None:
        checks.append(tf.debugging.assert_less_equal(max_length, longest_search, message=(
            f"max_length must be <= {longest_search} for this model (its decoding buffers were sized for it "
            "at export: export again with --max-length to raise it)")))
    with tf.control_dependencies([check for check in checks if check is not None]):
        return tf.identity(beam_size), tf.identity(max_length)


def export_saved_model(run_dir: str, export_dir: str, ensemble: Sequence[str] = (),
                       model_name: str = "tablegen", decode_overrides: Optional[Mapping] = None,
                       ensemble_weights: Optional[Sequence[float]] = None) -> str:
    """Writes the SavedModel of a training run's best checkpoint to ``export_dir``; with
    ``ensemble`` (more run directories), of the runs' ensemble (tablegen_tf.ensemble;
    ``ensemble_weights``: the members' weights), which decodes with ``run_dir``'s config,
    whose decode fields ``decode_overrides`` replaces (e.g. a run trained with greedy
    validations, served with the beam chosen afterwards)."""
    from tablegen_tf.ensemble import load_ensemble

    decode_overrides = dict(decode_overrides or {})
    trained = load_ensemble([run_dir, *ensemble], ensemble_weights, decode_overrides.get("max_length"))
    config = dataclasses.replace(trained.config, decode=dataclasses.replace(
        trained.config.decode, **decode_overrides))
    module = ServingModule(trained.model, trained.featurizer, config)
    options = tf.saved_model.SaveOptions()
    module.track_captured_variables(options)
    tf.saved_model.save(module, export_dir, signatures=module.signatures(), options=options)
    os.makedirs(os.path.dirname(os.path.join(export_dir, CONFIG_ASSET)), exist_ok=True)
    with open(os.path.join(export_dir, CONFIG_ASSET), "w") as handle:
        json.dump(config.to_dict(), handle, indent=2)
    with open(os.path.join(export_dir, MEMBERS_ASSET), "w") as handle:
        members = {"checkpoints": trained.checkpoint.split(" + ")}
        if len(members["checkpoints"]) > 1:
            members["weights"] = trained.model.member_weights
        json.dump(members, handle, indent=2)
    examples = write_examples(trained.featurizer, trained.config.data.valid, export_dir)
    # A run without a validation split still warms up on real inputs: its training split's.
    warmup_inputs = examples or spread_inputs(trained.featurizer, trained.config.data.train)
    if not warmup_inputs and trained.featurizer.serving_input == "tables":
        warmup_inputs = [BUILTIN_WARMUP_TABLE]
    write_warmup_requests(export_dir, warmup_requests(
        trained.featurizer.serving_input, warmup_inputs, set(module.signatures()), config.decode),
        model_name)
    return export_dir


def spread_inputs(featurizer, data_dir, count: int = EXAMPLE_COUNT) -> list:
    """``count`` distinct inputs spread over a split, in the serving input form; none when
    the split is not readable here (e.g. exported on another machine than it was trained on)."""
    from tablegen_tf.data.input_pipeline import list_files

    inputs = {}
    try:
        for record in tf.data.TFRecordDataset(list_files(data_dir), compression_type="GZIP"):
            inputs.setdefault(featurizer.parse_example(record.numpy()).serving_input(), None)
    except (tf.errors.OpError, OSError, ValueError, TypeError):
        inputs = {}
    distinct = list(inputs)
    step = max(len(distinct) / count, 1)
    return [distinct[int(i * step)] for i in range(min(count, len(distinct)))]


def write_examples(featurizer, data_dir, export_dir: str, count: int = EXAMPLE_COUNT) -> list:
    """The validation split's spread inputs as EXAMPLES_ASSET (the try-it page's examples)."""
    examples = spread_inputs(featurizer, data_dir, count)
    with open(os.path.join(export_dir, EXAMPLES_ASSET), "w", encoding="utf-8") as handle:
        handle.writelines(f"{example}\n" for example in examples)
    return examples


def warmup_requests(input_name: str, inputs: Sequence[str], signatures, decode) -> list:
    """(signature, {input: array}) pairs: for ``serving_default`` the shortest and the
    longest input alone, all of them as one batch and, with ``decode.parallel_searches`` > 1,
    a batch of PARALLEL_MIN_BATCH rows (the inputs repeated): one request per search the
    server's batch sizes take (one table: the XLA search; a few: one graph loop; many: the
    parallel searches); ``explain`` and ``generate`` (at the run's beam, at most the widest
    supported, and max length) once on the shortest."""
    import numpy as np

    if not inputs:
        return []
    by_length = sorted(inputs, key=len)
    one = {input_name: np.array([by_length[0]], dtype=object)}
    requests = [("serving_default", one),
                ("serving_default", {input_name: np.array([by_length[-1]], dtype=object)}),
                ("serving_default", {input_name: np.array(by_length, dtype=object)})]
    if decode.parallel_searches > 1 and len(by_length) < PARALLEL_MIN_BATCH:
        rows = [by_length[i % len(by_length)] for i in range(PARALLEL_MIN_BATCH)]
        requests.append(("serving_default", {input_name: np.array(rows, dtype=object)}))
    if "explain" in signatures:
        requests.append(("explain", one))
    if "generate" in signatures:
        # a run may decode wider (webnlg.yaml: 15) than the signature's widths
        beam_size = min(decode.beam_size, max(SUPPORTED_BEAMS))
        requests.append(("generate", {**one, "beam_size": np.int32(beam_size),
                                      "max_length": np.int32(decode.max_length),
                                      "must_include": np.zeros([1, 0], dtype=object)}))
    return requests


def write_warmup_requests(export_dir: str, requests, model_name: str = "tablegen") -> int:
    """WARMUP_ASSET in TF Serving's format: a TFRecord of PredictionLog, each holding a
    PredictRequest. TF Serving replays it on load; its model_spec.name is not checked."""
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    if not requests:
        return 0
    path = os.path.join(export_dir, WARMUP_ASSET)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature, arrays in requests:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = model_name
            request.model_spec.signature_name = signature
            for key, value in arrays.items():
                dtype = tf.string if value.dtype == object else None  # also for empty arrays
                request.inputs[key].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return len(requests)


def saved_model_config(export_dir: str):
    """The tablegen Config stored beside a SavedModel (``CONFIG_ASSET``)."""
    from tablegen_tf.config import build_config

    with tf.io.gfile.GFile(os.path.join(export_dir, CONFIG_ASSET)) as handle:
        return build_config(json.load(handle))


def next_version_dir(base: str) -> str:
    """TF Serving layout BASE/<int version>/: the next free version number."""
    versions = [int(name) for name in tf.io.gfile.listdir(base) if name.strip("/").isdigit()] if tf.io.gfile.exists(base) else []
    return os.path.join(base, str(max(versions, default=0) + 1))
