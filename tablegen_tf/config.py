"""Typed configuration: one dataclass per section holds the only defaults.

(No TensorFlow import here: pipeline and CLI code reads configs before deciding to start TF.)

    code defaults  <-  configs/<corpus>.yaml (or any YAML file)  <-  --set overrides

The YAML files only override. Mappings merge key by key; lists and scalars replace.
An unknown key or a value of the wrong type is an error naming the key and the
closest valid one. The ``model`` section belongs to the model family named by
``model.name`` (``tablegen_tf.models``): its dataclass, defaults and checks come from
that family. A corpus file tunes families by kind under ``models:`` (e.g.
``models: {encdec: {num_layers: 1}}``), applied when the chosen family is of that kind,
so ``--config e2e --set model.name=<another family>`` never trips over settings meant
for another architecture.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import typing
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Union

import yaml

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
CORPORA = ("e2e", "webnlg", "rotowire_sentences", "rotowire", "wikibio")
DEFAULT_MODEL = "encdec-copy"
FAMILY_SETTINGS = "models"  # corpus-file section: per-family-kind model settings


class ConfigError(ValueError):
    """A config key or value that is not valid (the message names it)."""


# ----------------------------------------------------------------- sections


@dataclasses.dataclass(frozen=True)
class Bound:
    """A setting's range, stated once in its section's ``BOUNDS``: the section refuses a value
    outside it (``check_bounds``), and the command line's flag for it refuses one before
    anything loads (tablegen_cli)."""

    accepts: Callable[[Any], bool]
    requirement: str  # "must be ...", completed by ", got VALUE"


def at_least(minimum) -> Bound:
    return Bound(lambda value: value >= minimum, f"must be >= {minimum}")


def between(low, high) -> Bound:
    return Bound(lambda value: low <= value <= high, f"must be between {low} and {high}")


def above(minimum) -> Bound:
    return Bound(lambda value: value > minimum, f"must be > {minimum}")


def at_least_below(low, high) -> Bound:
    """[low, high): e.g. a dropout rate (1 would drop everything)."""
    return Bound(lambda value: low <= value < high, f"must be at least {low} and below {high}")


def check_bounds(section: str, settings) -> None:
    """A ConfigError naming ``section.key`` for the first setting outside its class's
    ``BOUNDS`` (none: a model family's config may declare none). A tensor (the SavedModel's
    `generate` takes beam_size and max_length per request) is checked in its graph instead
    (tablegen_tf.export.checked_decoding_inputs)."""
    for key, bound in getattr(type(settings), "BOUNDS", {}).items():
        value = getattr(settings, key)
        if isinstance(value, (int, float)) and not bound.accepts(value):
            raise ConfigError(f"{section}.{key} {bound.requirement}, got {value}")


LR_SCHEDULES = ("constant", "cosine", "linear")  # tablegen_tf.training.lr_schedule


@dataclasses.dataclass
class OptimizerConfig:
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "learning_rate": above(0), "clipnorm": at_least(0),
        "clipvalue": at_least(0), "rho": between(0, 1), "warmup_steps": at_least(0),
        "final_lr_fraction": between(0, 1), "ema_momentum": at_least_below(0, 1),
    }
    name: str = "adam"  # adam | rmsprop | sgd
    learning_rate: float = 0.001
    clipnorm: float = 5.0  # global norm clipping of the aggregated gradient
    clipvalue: float = 0.0  # element-wise clipping instead of clipnorm when > 0
    rho: float = 0.9  # rmsprop: moving-average decay of squared gradients
    # constant | cosine | linear: anneal learning_rate to final_lr_fraction x it over
    # train.max_steps (tablegen_tf.training.lr_schedule); decay on plateau scales the curve
    schedule: str = "constant"
    warmup_steps: int = 0  # linear ramp from learning_rate / warmup_steps, any schedule
    final_lr_fraction: float = 0.0
    # > 0: validation, the best checkpoint (so evaluate and export) use an exponential moving
    # average of the weights (Polyak averaging), new = m * old + (1 - m) * weights after each
    # step; training goes on from the raw weights. 0 = off.
    ema_momentum: float = 0.0

    def __post_init__(self):
        check_bounds("train.optimizer", self)


def check_schedule(config: OptimizerConfig, max_steps: int) -> None:
    """A clear error for a learning-rate schedule the step budget cannot define."""
    if config.schedule not in LR_SCHEDULES:
        raise ConfigError(f"train.optimizer.schedule: unknown schedule {config.schedule!r}: one of "
                          f"{', '.join(LR_SCHEDULES)}")
    if config.schedule != "constant" and max_steps <= 0:
        raise ConfigError(f"train.optimizer.schedule: {config.schedule!r} anneals over the step budget: "
                          "set train.max_steps (or --max-steps)")


@dataclasses.dataclass
class TbpttConfig:
    """Truncated BPTT (thesis, RotoWire): backpropagate t2 steps every t1 steps."""

    BOUNDS: ClassVar[Dict[str, Bound]] = {"t1": at_least(1), "t2": at_least(1)}
    t1: int = 100
    t2: int = 100

    def __post_init__(self):
        check_bounds("train.tbptt", self)


@dataclasses.dataclass
class DataConfig:
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "max_words": at_least(0), "batch_size": at_least(1), "max_position": at_least(1),
        "max_target_length": at_least(0), "max_records": at_least(0), "max_source_length": at_least(0),
        "shuffle_buffer": at_least(0), "cache_max_mb": at_least(0), "unknown_value_words": at_least_below(0, 1),
        "unknown_word_alpha": at_least(0),
    }
    train: Optional[str] = None  # directories written by `tablegen prepare`
    valid: Optional[str] = None
    vocab: Optional[str] = None  # default: <train>/vocab
    max_words: int = 0  # 0 = the whole word vocabulary
    batch_size: int = 64
    bucket_boundaries: List[int] = dataclasses.field(default_factory=lambda: [16, 24, 32, 48, 64, 96, 128, 256, 512])
    max_position: int = 30  # p+/p- clip; position embeddings have max_position + 1 rows
    max_target_length: int = 0  # 0 = whole targets (use TBPTT for long ones)
    max_records: int = 0  # table form: 0 = every record
    max_source_length: int = 0  # text form: 0 = whole sources
    shuffle_buffer: int = 10000
    expand_references: bool = False  # training: one example per reference, not only the first
    # training: each table's values in a new random order every time (a field's words kept
    # together); evaluation and serving read the table's own order
    shuffle_attributes: bool = False
    # training: a table of n values is read repeat_by_table_size[n] times an epoch (the last
    # entry for larger tables; [] = once each): moves the training mix of table sizes toward
    # a test set's larger tables (a covariate-shift correction; README, E2E quality run)
    repeat_by_table_size: List[int] = dataclasses.field(default_factory=list)
    # training: each of a table's in-vocabulary value words is made <unk> with this probability,
    # in the table and the target alike, so that the model learns to copy words it has no
    # embedding for (a table of a domain never seen in training has many: README, "WebNLG
    # categories never seen in training"); 0 = off
    unknown_value_words: float = 0.0
    # training: each value word is also made <unk> with probability alpha / (alpha + its count
    # in the training split, vocab/words.counts.tsv): rare words often, common ones seldom
    # (Kiperwasser and Goldberg 2016's word dropout); 0 = off
    unknown_word_alpha: float = 0.0
    # training: parsed examples are cached in memory (parsed once, not every epoch) when the
    # example files total at most this many MB on disk (~25x that in memory); training and
    # validation sets this small are read in content order (the same batches whatever Beam
    # wrote); 0 = never
    cache_max_mb: int = 16

    def __post_init__(self):
        check_bounds("data", self)


@dataclasses.dataclass
class TrainConfig:
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "max_steps": at_least(0), "max_minutes": at_least(0), "eval_every_steps": at_least(1),
        "eval_max_examples": at_least(0), "eval_loss_batches": at_least(0), "checkpoint_every_steps": at_least(1),
        "keep_checkpoints": at_least(1), "early_stopping_patience": at_least(0), "decay_on_plateau": between(0, 1),
        "log_every_steps": at_least(1),
    }
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    tbptt: Optional[TbpttConfig] = None
    max_steps: int = 0  # the budget (0 = no step limit)
    max_minutes: float = 0.0  # a wall-time safety cap (0 = none)
    seed: int = 1  # initialisation and input order
    eval_every_steps: int = 1000  # validation BLEU (decode data.valid with the decode config)
    eval_max_examples: int = 0  # 0 = the whole validation split
    eval_loss_batches: int = 50
    checkpoint_every_steps: int = 1000
    keep_checkpoints: int = 3
    early_stopping_patience: int = 5  # evaluations without a BLEU gain; 0 = never stop early
    decay_on_plateau: float = 0.5  # lr *= factor after an evaluation without a gain; 0 = off
    # lr *= decay_on_plateau after each of these steps, validation or not: a refit on all the
    # training data replays the schedule a validated run took (its plateaus) without validating
    decay_at_steps: List[int] = dataclasses.field(default_factory=list)
    log_every_steps: int = 20  # TensorBoard scalars and progress
    strategy: str = "default"  # default | mirrored | multi_worker_mirrored (tf.distribute)

    def __post_init__(self):
        check_bounds("train", self)
        check_schedule(self.optimizer, self.max_steps)


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    lowercase: bool = False
    normalization: str = "NFC"  # Unicode normalization of tablegen_tf.tokenizer

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class DecodeConfig:
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "beam_size": at_least(1), "max_length": at_least(1), "pragmatic_alpha": between(0, 1),
        "mbr_weight": at_least(0), "mbr_samples": at_least(1), "no_repeat_ngram_size": at_least(0),
        "mbr_epsilon": at_least_below(0, 1),
        "mbr_references": at_least(1), "mbr_rows": at_least(1), "parallel_searches": at_least(1),
    }
    beam_size: int = 5
    max_length: int = 100
    length_penalty: float = 0.0  # GNMT alpha; 0 = plain sum of log-probs
    # Never emit <unk>: with copy an unknown source word is produced by copying it.
    forbid_unk: bool = True
    # Beam reranking by slot errors (tablegen_tf.reranking): each finished beam's score
    # minus this weight x its missed + wrong + added table values; 0 = off. E2E-style
    # tables only (others have no slot errors, so the model's order stands).
    slot_rerank_weight: float = 0.0
    # Beam reranking by table coverage (same reranker): minus this weight x the distinct
    # table subject/object/name words and numbers the beam leaves out; any table; 0 = off.
    coverage_rerank_weight: float = 0.0
    # The end gate (tablegen_tf.reranking.SlotEndGate): during the search, ending a
    # hypothesis costs this much log-prob per slot of its E2E-style table not yet realised;
    # 0 = off. Reranking only chooses among kept beams; the gate keeps ones that go on.
    slot_end_penalty: float = 0.0
    # N-gram repeat blocking (tablegen_tf.decoding.repeats): no hypothesis says the same n
    # tokens twice (copies compared by their text); 0 = off.
    no_repeat_ngram_size: int = 0
    # Pragmatic rescoring of the kept beams (tablegen_tf.pragmatics, Shen et al. 2019):
    # (1 - alpha) x score + alpha x log L0(table | beam) against the table's omission
    # distractors, before the reranking weights; 0 = off. Tables only.
    pragmatic_alpha: float = 0.0
    # Minimum Bayes risk (tablegen_tf.reranking): each kept beam also gains this weight x its
    # mean sentence BLEU (0-1) against mbr_samples draws of the model (epsilon sampling,
    # tablegen_tf.decoding.sampling, tokens below mbr_epsilon never drawn; seed mbr_seed, so
    # the same input gets the same text in any batch); 0 = off. Costs mbr_samples sampled
    # decodes per input. mbr_references > 1: BLEU against groups of that many draws at once
    # (multi-reference BLEU, as corpus BLEU scores against a table's several references).
    mbr_weight: float = 0.0
    mbr_samples: int = 32
    mbr_epsilon: float = 0.02
    mbr_seed: int = 1
    mbr_references: int = 1
    # The draws run at most this many rows (inputs x mbr_samples) at once; a larger batch
    # draws its samples in chunks (the largest divisor of mbr_samples that fits, at least
    # one). The model's decoding state (a Transformer's key/value caches) grows with it;
    # the texts do not depend on it.
    mbr_rows: int = 1024
    # A batch of at least tablegen_tf.generation.PARALLEL_MIN_BATCH inputs is searched as
    # this many parts side by side (the same beams; scores may differ in the last bit,
    # tablegen_tf.decoding.beam's _in_parallel_parts): on a CPU of a few cores one search's
    # small per-step ops leave cores idle. 1 = one search (e.g. on a GPU).
    parallel_searches: int = 2

    def __post_init__(self):
        check_bounds("decode", self)
        if self.mbr_samples % self.mbr_references:
            raise ConfigError(f"decode.mbr_references must divide decode.mbr_samples ({self.mbr_samples}), "
                              f"got {self.mbr_references}")


@dataclasses.dataclass
class Config:
    model: Any  # the family's dataclass (tablegen_tf.models.registry)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    decode: DecodeConfig = dataclasses.field(default_factory=DecodeConfig)
    tokenizer: TokenizerConfig = dataclasses.field(default_factory=TokenizerConfig)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **sections) -> "Config":
        return dataclasses.replace(self, **sections)


SECTIONS = {"data": DataConfig, "train": TrainConfig, "decode": DecodeConfig, "tokenizer": TokenizerConfig}


# ----------------------------------------------------------------- strict parsing


def from_dict(cls, values: Optional[Mapping], path: str = ""):
    """``cls`` (a dataclass) from a mapping; unknown keys and wrong types are errors."""
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path or 'config'} must be a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(unknown_key_message(_join(path, key), list(fields), path))
        kwargs[key] = _coerce(value, hints[key], _join(path, key))
    return cls(**kwargs)


def unknown_key_message(dotted: str, valid: Iterable[str], parent: str = "") -> str:
    key = dotted.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    hint = f"; did you mean {_join(parent, close[0])!r}?" if close else ""
    return f"unknown config key {dotted!r}{hint} (valid keys of {parent or 'the config'}: {', '.join(sorted(valid))})"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _coerce(value, hint, path: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:  # Optional[X]
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, path)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, path)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        return [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not (isinstance(value, hint) and not (hint is int and isinstance(value, bool))):
        raise ConfigError(f"{path} must be {hint.__name__}, got {type(value).__name__} {value!r}")
    return value


# ----------------------------------------------------------------- YAML + overrides


def deep_merge(base: Mapping, override: Mapping) -> Dict[str, Any]:
    """New dict: ``override`` merged into ``base`` (nested mappings merge, the rest replaces)."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_yaml(path: str) -> Dict[str, Any]:
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path} (a corpus name is one of {', '.join(available_configs())})")
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def available_configs() -> List[str]:
    return sorted(name[: -len(".yaml")] for name in os.listdir(CONFIG_DIR) if name.endswith(".yaml"))


def config_path(corpus_or_path: str) -> str:
    """A corpus name (``e2e``), a path to a YAML file, or a file under CONFIG_DIR (``table_nlm/nlm``)."""
    if corpus_or_path.endswith((".yaml", ".yml")) or os.path.sep in corpus_or_path:
        if os.path.exists(corpus_or_path):
            return corpus_or_path
        bundled = os.path.join(CONFIG_DIR, corpus_or_path)
        bundled = bundled if bundled.endswith((".yaml", ".yml")) else f"{bundled}.yaml"
        return bundled if os.path.exists(bundled) else corpus_or_path
    return os.path.join(CONFIG_DIR, f"{corpus_or_path}.yaml")


def parse_overrides(items: Iterable[str]) -> Dict[str, Any]:
    """["model.hidden_size=128", "train.tbptt={t1: 50, t2: 100}", "model=@file.yaml"] -> nested dict
    (YAML values; ``@path`` reads the value from a YAML file)."""
    result: Dict[str, Any] = {}
    for item in items:
        dotted, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key.path=value")
        *parents, leaf = dotted.strip().split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        raw = raw.strip()
        if raw.startswith("@"):  # key=@file.yaml: the file's YAML is the value (e.g. an ablation's model section)
            node[leaf] = read_yaml(raw[1:])
        else:
            node[leaf] = yaml.safe_load(raw)
    return result


def build_config(values: Mapping[str, Any]) -> Config:
    """A Config from one merged mapping (``models:`` family settings applied)."""
    from tablegen_tf.models.registry import get_family

    values = dict(values)
    family_settings = values.pop(FAMILY_SETTINGS, None) or {}
    model_values = dict(values.pop("model", None) or {})
    known = set(SECTIONS) | {"model", FAMILY_SETTINGS}
    for key in values:
        if key not in SECTIONS:
            raise ConfigError(unknown_key_message(key, known))
    family = get_family(model_values.get("name", DEFAULT_MODEL))
    merged = {}
    for kind in family.kinds():
        merged = deep_merge(merged, family_settings.get(kind) or {})
    model = from_dict(family.config_class, deep_merge(merged, {**model_values, "name": family.name}), "model")
    check_bounds("model", model)  # the family config's own BOUNDS
    sections = {name: from_dict(cls, values.get(name), name) for name, cls in SECTIONS.items()}
    return Config(model=model, **sections)


def load_config(corpus_or_path: Optional[str] = None, overrides: Union[Mapping, Iterable[str], None] = None) -> Config:
    """Code defaults <- a corpus config (name or YAML path; several comma-separated merge in
    order, e.g. ``e2e,table_nlm/nlm``) <- overrides (dict or key=value list)."""
    values: Dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in (corpus_or_path or "").split(","))):
        values = deep_merge(values, read_yaml(config_path(part)))
    if overrides:
        if not isinstance(overrides, Mapping):
            overrides = parse_overrides(overrides)
        values = deep_merge(values, overrides)
    return build_config(values)


# ----------------------------------------------------------------- run directories

CONFIG_FILE = "config.json"
CONFIG_FORMAT = 2  # config.json of runs before the model-family registry had no "format"


def save_run_config(config: Config, run_dir: str) -> str:
    path = os.path.join(run_dir, CONFIG_FILE)
    with open(path, "w") as handle:
        json.dump({"format": CONFIG_FORMAT, **config.to_dict()}, handle, indent=2)
    return path


def load_run_config(run_dir: str) -> Config:
    """The merged config a run stored; runs of older tablegen versions are converted."""
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.exists(path):
        raise ConfigError(f"{run_dir} is not a tablegen run directory: no {CONFIG_FILE} (written by `tablegen train`)")
    with open(path) as handle:
        values = json.load(handle)
    version = values.pop("format", 1)
    if version == 1:
        values = _convert_format_1(values)
    try:
        return build_config(values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}. Fix the file by hand, or retrain with this tablegen version") from None


def _convert_format_1(values: Dict[str, Any]) -> Dict[str, Any]:
    """Runs written before the registry stored every key of every family in one model
    section (max_plan_length, a copy of max_position): keep the keys the family knows."""
    from tablegen_tf.models.registry import get_family

    values = copy.deepcopy(values)
    model = values.get("model", {})
    family = get_family(model.get("name", DEFAULT_MODEL))
    valid = {f.name for f in dataclasses.fields(family.config_class)}
    values["model"] = {k: v for k, v in model.items() if k in valid}
    valid_data = {f.name for f in dataclasses.fields(DataConfig)}
    values["data"] = {k: v for k, v in values.get("data", {}).items() if k in valid_data}
    return values
