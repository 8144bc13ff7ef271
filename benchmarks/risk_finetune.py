"""Experiment: minimum-risk fine-tuning of an order-planning run over its own beam candidates.

Sequence-level risk with beam candidates (Edunov et al. 2018, "Classical Structured
Prediction Losses for Sequence to Sequence Learning", the risk loss; Shen et al. 2016, MRT):
for each training table, the current model's K beams u, cost(u) = 1 - sentence BLEU(u)/100
(sacrebleu, lowercased) against ALL training references of that table, and

    L = w * token NLL(reference) + (1 - w) * sum_u q(u) cost(u),  q = softmax_u log p(u | table)

(their weighted combination of the token-level and the sequence-level loss; w = 0.3). log p(u | table) is the teacher-forced
sum of the candidate's extended-vocabulary log-probs, which equals the beam's score (checked
at the first step and printed). Fine-tunes from the run's best checkpoint with a fresh Adam
and writes a run directory `tablegen evaluate --model` reads (the source run's config and
vocabulary, the fine-tuned weights as its best checkpoint).

Tried on the E2E quality run's 128-unit member (README, "Minimum-risk fine-tuning, and all
six members, tried and not kept"): selection BLEU 71.43 -> 71.37 at the chosen decoding,
outputs ~1 word longer; with `--cost length-neutral` (another draw's member) 71.85 -> 67.74,
outputs 1.5 words longer.

    .venv/bin/python benchmarks/risk_finetune.py --run runs/op128-s1 \\
        --train runs/data/e2e-sel/train --out runs/op128-risk [--steps 300 --lr 1e-4]
"""

import argparse
import collections
import dataclasses
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def references_by_table(featurizer, train_dir: str):
    """example_id -> every training reference of its table (the split has one example per
    reference; a table is its fields and values)."""
    import tensorflow as tf

    from tablegen_tf.data import input_pipeline as ip

    by_table, table_of = collections.defaultdict(list), {}
    for record in tf.data.TFRecordDataset(ip.list_files(train_dir), compression_type="GZIP"):
        example = featurizer.parse_example(record.numpy())
        key = (tuple(example.fields), tuple(example.values))
        by_table[key].extend(example.all_references())
        table_of[example.example_id] = key
    return {example_id: by_table[key] for example_id, key in table_of.items()}, len(by_table)


def sentence_gain(bleu, text: str, refs, top_words: int, length_neutral: bool) -> float:
    """Sentence BLEU in [0, 1]; ``length_neutral``: without its brevity penalty, times
    exp(-|ln(words / top beam's words)|). Per-sentence BP rewards length that corpus BLEU, already
    at BP 1.0, does not (the plain cost lengthened outputs by 0.9 words), and precision alone
    rewards shortness: tying length to the top beam leaves the risk to move precision only."""
    import math

    score = bleu.sentence_score(text, refs)
    if not length_neutral:
        return score.score / 100.0
    words = max(len(text.split()), 1)
    return (score.score / score.bp if score.bp > 0 else 0.0) / 100.0 * math.exp(-abs(math.log(words / max(top_words, 1))))


def costs(texts, scores, example_ids, references, bleu, length_neutral: bool = False):
    """1 - sentence gain per candidate [B, K]; dead beams cost 1."""
    import numpy as np

    out = np.ones(texts.shape, np.float32)
    for row, example_id in enumerate(example_ids):
        refs = references[example_id.decode("utf-8")]
        top_words = len(texts[row, 0].decode("utf-8").split())
        for beam, text in enumerate(texts[row]):
            if np.isfinite(scores[row, beam]):  # dead beams score -inf (beam_search)
                out[row, beam] = 1.0 - sentence_gain(bleu, text.decode("utf-8"), refs, top_words, length_neutral)
    return out


def risk_step_fn(model, optimizer, token_weight: float):
    import tensorflow as tf

    from tablegen_tf.constants import BOS_ID, MASKED_LOGIT

    @tf.function(reduce_retracing=True)
    def step(batch, ids, lengths, scores, cost):
        rows, beams, steps = tf.shape(ids)[0], tf.shape(ids)[1], tf.shape(ids)[2]
        flat = tf.reshape(ids, [rows * beams, steps])
        inside = tf.sequence_mask(tf.reshape(lengths, [-1]), steps)
        alive = tf.math.is_finite(scores)
        with tf.GradientTape() as tape:
            nll = model.compute_loss_from_batch(batch, training=True)
            memory = model.tile(model.encode(batch, training=True), beams)
            target_in = tf.concat([tf.fill([rows * beams, 1], BOS_ID),
                                   model.feedback_ids(flat[:, :-1], memory["record_value"])], 1)
            outputs, _ = model.decode_sequence(memory, target_in, model.initial_decoding_state(memory),
                                               training=True)
            no_copy_labels = tf.zeros([rows * beams, steps, tf.shape(memory["record_value"])[1]],
                                      batch["copy_mask"].dtype)  # candidates are extended ids already
            token = model.token_nll(outputs, memory, flat, no_copy_labels)
            log_p = tf.where(alive, tf.reshape(-tf.reduce_sum(tf.where(inside, token, 0.0), 1), [rows, beams]),
                             MASKED_LOGIT)
            risk = tf.reduce_mean(tf.reduce_sum(tf.nn.softmax(log_p, axis=1) * cost, 1))  # expected cost
            loss = token_weight * nll + (1.0 - token_weight) * risk
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return nll, risk, tf.reduce_max(tf.abs(tf.where(alive, log_p - scores, 0.0)))

    return step


def save_run(model, config, source_run: str, out: str, steps: int) -> None:
    import tensorflow as tf

    from tablegen_tf.config import save_run_config
    from tablegen_tf.training.trainer import BEST, copy_vocabularies, variables_checkpoint

    vocab = copy_vocabularies(os.path.join(source_run, "vocab"), os.path.join(out, "vocab"))  # as a trainer does
    save_run_config(config.replace(data=dataclasses.replace(config.data, vocab=vocab)), out)
    step = tf.Variable(steps, dtype=tf.int64)
    tf.train.CheckpointManager(variables_checkpoint(model, step=step), os.path.join(out, BEST),
                               max_to_keep=1).save(checkpoint_number=steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="an order-planning run directory")
    parser.add_argument("--train", required=True, help="its prepared training split")
    parser.add_argument("--out", required=True, help="the fine-tuned run directory to write")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--token-weight", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cost", choices=["bleu", "length-neutral"], default="bleu",
                        help="1 - sentence BLEU, or 1 - its n-gram part times a penalty for a length "
                        "away from the top beam's (README, minimum-risk fine-tuning)")
    args = parser.parse_args()

    import keras
    import tensorflow as tf
    from sacrebleu.metrics import BLEU

    from tablegen_tf.generation import decode_beams
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(args.run)
    model, featurizer = trained.model, trained.featurizer
    references, tables = references_by_table(featurizer, args.train)
    print(f"{len(references):,} training examples, {tables:,} tables", flush=True)
    plain_beams = dataclasses.replace(trained.config.decode, beam_size=args.beams, slot_rerank_weight=0.0,
                                      slot_end_penalty=0.0, coverage_rerank_weight=0.0, pragmatic_alpha=0.0)

    @tf.function(reduce_retracing=True)
    def candidates(batch):
        ids, lengths, scores, _, _ = decode_beams(model, featurizer, batch, plain_beams)
        return ids, lengths, scores, featurizer.candidate_texts(batch, ids, lengths)

    optimizer = keras.optimizers.Adam(learning_rate=args.lr, global_clipnorm=trained.config.train.optimizer.clipnorm)
    optimizer.build(model.trainable_variables)
    step = risk_step_fn(model, optimizer, args.token_weight)
    bleu = BLEU(lowercase=True, effective_order=True)
    batches = iter(featurizer.dataset(args.train, training=True, seed=args.seed).repeat())
    start = time.time()
    for number in range(1, args.steps + 1):
        batch = next(batches)
        ids, lengths, scores, texts = candidates(batch)
        cost = costs(texts.numpy(), scores.numpy(), batch["example_id"].numpy(), references, bleu,
                     args.cost == "length-neutral")
        nll, risk, gap = step(batch, ids, lengths, scores, tf.constant(cost))
        if number == 1:
            print(f"teacher-forced log p - beam score: at most {float(gap):.1e}", flush=True)
        if number % 20 == 0:
            print(f"step {number}: token NLL {float(nll):.3f}, risk {float(risk):.4f}, "
                  f"best beam's cost {cost[:, 0].mean():.4f}, {time.time() - start:.0f}s", flush=True)
    save_run(model, trained.config, args.run, args.out, args.steps)
    print(f"fine-tuned {args.steps} steps in {time.time() - start:.0f}s -> {args.out}")


if __name__ == "__main__":
    from quiet import run_quietly  # benchmarks/ is on sys.path when a script runs

    run_quietly(main)
