"""The one place for tablegen's special tokens and numeric constants.

Vocabulary files list the special tokens first, so their ids are fixed:
words ``<pad> <unk> <s> </s>`` (0-3); fields / entities / groups
``<pad> <unk> <none>`` (0-2).
"""

SPECIAL_WORDS = ("<pad>", "<unk>", "<s>", "</s>")
SPECIAL_SYMBOLS = ("<pad>", "<unk>", "<none>")  # field, entity and group vocabularies
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIAL_WORDS))
NONE_ID = SPECIAL_SYMBOLS.index("<none>")  # "" entity/group: known to be absent, not unknown

# Two kinds of "minus infinity", kept apart on purpose:
# MASKED_LOGIT is added to the scores of masked positions BEFORE a softmax: finite, so a
# row whose every position is masked still gives a finite (uniform) softmax, no NaN.
MASKED_LOGIT = -1e9
# NEG_INF is the log-probability of a token the decoders must never pick.
NEG_INF = float("-inf")

# Beside each vocabulary <name>.txt, `prepare` writes <name>.counts.tsv ("token<TAB>count" lines,
# most frequent first); a run directory keeps a copy. Word hiding and Table NLM read them.
COUNTS_SUFFIX = ".counts.tsv"

# A few corpus tables exported beside the SavedModel (one JSON table per line) for the
# serving try-it page: written by tablegen_tf.export, served by serving.predictor.
EXAMPLES_ASSET = "assets.extra/tablegen_examples.jsonl"

# TF Serving replays this file (a TFRecord of PredictionLog protos) before a version takes
# traffic; `tablegen serve` does too. Written by tablegen_tf.export.
WARMUP_ASSET = "assets.extra/tf_serving_warmup_requests"
