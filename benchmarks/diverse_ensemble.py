"""Experiment: ensemble members resumed and trained jointly, on the same batches.

``--objective mcl``, diverse ensembling (Gehrmann et al. 2018, "End-to-End Content and Plan
Selection for Data-to-Text Generation", sec. 4, after multiple choice learning, Guzman-Rivera
et al. 2012): each training example's loss reaches only the member that scores it best,

    L = sum_n min_k NLL_k(y_n | x_n)

so the members drift apart into distinct sentence templates. Here each member's share of that
sum is a token mean over the examples it won (a member trains at the learning rate it was
trained with, whatever its share). One forward pass per member both scores and trains: the
assignment is the argmin of the same per-example NLLs under a stop-gradient. Joint training
from scratch lets one member win every example (the paper's "dominating" model); these members
start instead from independently trained runs, resumed with their Adam state.

``--objective mixture``: the NLL of the members' average step distribution,
-log (1/K) sum_k p_k(y_t), the ensemble exactly as tablegen decodes it.

``--objective independent`` is the control: every member trains on every example.

``--scheduled-sampling RATE`` (with any objective): each decoder input is, with probability
RATE, the member's own sampled word instead of the reference's (parallel scheduled sampling).

Tried on the E2E quality run's members, 2,000 steps (README, "Joint training of the members"):
selection BLEU 72.89 -> 73.42 (mcl), 73.54 (mixture), 73.68 (independent) on one draw; on a
second draw mixture 73.17 -> 72.91 and independent 71.99. Scheduled sampling 0.25 (independent):
73.22 and 72.56. Not kept.

    .venv/bin/python benchmarks/diverse_ensemble.py --runs runs/op128-s1 runs/op256-s1 \\
        runs/op256c-s1 --train runs/data/e2e-sel/train --out runs/mcl [--steps 2000]

writes runs/mcl/<run name> for each member, a run directory `tablegen evaluate --model ...
--ensemble ...` reads.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def token_nll(model, batch, training: bool):
    """[B,T] each reference token's NLL under the member, 0 on padding."""
    import tensorflow as tf

    predictions = model(batch, training=training)
    token = model.token_nll(predictions["outputs"], predictions["memory"], batch["target_out"], batch["copy_mask"])
    return token * tf.cast(batch["target_mask"], tf.float32)


def assignment(nll, objective: str):
    """[K,B] 0/1 weights: the member with the lowest NLL per example (mcl), or every member."""
    import tensorflow as tf

    if objective == "mcl":
        return tf.one_hot(tf.argmin(tf.stop_gradient(nll), axis=0), tf.shape(nll)[0], axis=0)
    return tf.ones_like(nll)


def mixture_nll(token_nlls, mask):
    """The ensemble's own per-token NLL, -log (1/K) sum_k p_k(y_t): the distribution the
    ensemble decodes with is the members' average (tablegen_tf.ensemble), so this trains the
    served model. token_nlls [K,B,T]; the mean over the batch's tokens."""
    import tensorflow as tf

    members = tf.cast(tf.shape(token_nlls)[0], tf.float32)
    mixed = -(tf.reduce_logsumexp(-token_nlls, 0) - tf.math.log(members))
    return tf.math.divide_no_nan(tf.reduce_sum(mixed * mask), tf.reduce_sum(mask))


def sampled_inputs(model, batch, rate: float):
    """Scheduled sampling in its parallel form (Bengio et al. 2015; Duckworth et al. 2019): each
    decoder input after <s> is, with probability ``rate``, the word the model samples at the
    previous position of a teacher-forced pass (no gradient), else the reference's; the model then
    learns to go on from its own words. Copy slots feed back their table word, as in decoding."""
    import tensorflow as tf

    gold = batch["target_in"]
    predictions = model(batch, training=False)
    logits = model.extended_logits(predictions["outputs"]["states"], predictions["memory"])  # [B,T,V+C]
    rows, steps = tf.shape(gold)[0], tf.shape(gold)[1]
    sampled = tf.reshape(tf.random.categorical(tf.reshape(logits, [rows * steps, -1]), 1, dtype=tf.int32),
                         [rows, steps])
    words = tf.cast(model.feedback_ids(sampled, predictions["memory"]["record_value"]), gold.dtype)
    previous = tf.concat([gold[:, :1], words[:, :-1]], 1)  # the sample for y_t is the input at t + 1
    coin = (tf.random.uniform([rows, steps]) < rate) & (tf.range(steps) > 0)[None, :]
    return tf.stop_gradient(tf.where(coin, previous, gold))


def joint_step_fn(models, optimizers, objective: str, sampling_rate: float = 0.0):
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def step(batch):
        mask = tf.cast(batch["target_mask"], tf.float32)
        tokens = tf.reduce_sum(mask, 1)  # [B]
        inputs = [{**batch, "target_in": sampled_inputs(model, batch, sampling_rate)} if sampling_rate else batch
                  for model in models]
        with tf.GradientTape(persistent=True) as tape:
            token_nlls = tf.stack([token_nll(model, member_batch, training=True)
                                   for model, member_batch in zip(models, inputs)])  # [K,B,T]
            nll = tf.reduce_sum(token_nlls, 2)  # [K,B]: each example's sequence NLL, what MCL compares
            won = assignment(nll, objective)
            if objective == "mixture":  # one loss; each member's gradient is its part of it
                losses = tf.fill([len(models)], mixture_nll(token_nlls, mask))
            else:  # each member: the token mean over the examples it won (eq. above, per member)
                losses = tf.math.divide_no_nan(tf.reduce_sum(won * nll, 1), tf.reduce_sum(won * tokens, 1))
            losses = [losses[k] + model.l2_penalty() for k, model in enumerate(models)]
        for model, optimizer, loss in zip(models, optimizers, losses):
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        del tape
        member_nll = tf.reduce_sum(nll, 1) / tf.reduce_sum(tokens)  # each member alone, every example
        return tf.stack(losses), tf.reduce_sum(won, 1), tf.shape(tokens)[0], member_nll

    return step


def resume(run: str):
    """The run's model at its latest training checkpoint, with its optimizer's state."""
    import tensorflow as tf

    from tablegen_tf.training.trainer import CHECKPOINTS, load_trained, make_optimizer, variables_checkpoint

    trained = load_trained(run)
    if trained.config.model.name != "order-planning":  # token_nll(outputs, memory, ...) is that family's
        raise SystemExit(f"{run}: an {trained.config.model.name!r} run; this experiment trains order-planning runs")
    optimizer = make_optimizer(trained.config.train.optimizer)
    optimizer.build(trained.model.trainable_variables)
    path = tf.train.latest_checkpoint(os.path.join(run, CHECKPOINTS))
    if not path:
        raise FileNotFoundError(f"{run}: no training checkpoint in {CHECKPOINTS}/")
    variables_checkpoint(trained.model, optimizer).restore(path).expect_partial().assert_existing_objects_matched()
    return trained, optimizer, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", required=True, help="order-planning run directories, one vocabulary")
    parser.add_argument("--train", required=True, help="the prepared training split every member reads")
    parser.add_argument("--out", required=True, help="writes OUT/<run name> per member")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1, help="the batch order (and the samples' seed)")
    parser.add_argument("--scheduled-sampling", type=float, default=0.0, metavar="RATE",
                        help="each decoder input is, with this probability, the member's own sampled word "
                        "(parallel scheduled sampling; default 0: the references')")
    parser.add_argument("--objective", choices=["mcl", "mixture", "independent"], default="mcl",
                        help="mcl: each example trains its best member; mixture: the members' average "
                        "distribution's NLL (the ensemble as decoded); independent: every member (the control)")
    args = parser.parse_args()

    import keras
    from risk_finetune import save_run

    members = [resume(run) for run in args.runs]
    vocabularies = {tuple(trained.vocabs.tokens["words"]) for trained, _, _ in members}
    if len(vocabularies) != 1:
        raise SystemExit("the runs do not share one word vocabulary (an ensemble needs one)")
    for run, (_, _, path) in zip(args.runs, members):
        print(f"{run}: resumed from {path}", flush=True)
    models = [trained.model for trained, _, _ in members]
    keras.utils.set_random_seed(args.seed)  # the scheduled samples
    step = joint_step_fn(models, [optimizer for _, optimizer, _ in members], args.objective, args.scheduled_sampling)
    batches = iter(members[0][0].featurizer.dataset(args.train, training=True, seed=args.seed).repeat())
    start, won_total, examples = time.time(), 0, 0
    for number in range(1, args.steps + 1):
        losses, won, rows, alone = step(next(batches))
        won_total, examples = won_total + won.numpy(), examples + int(rows)
        if number % 100 == 0 or number == args.steps:
            shares = " / ".join(f"{100 * w / examples:.0f} %" for w in won_total)
            print(f"step {number}: losses {' / '.join(f'{x:.3f}' for x in losses.numpy())}; each alone "
                  f"{' / '.join(f'{x:.3f}' for x in alone.numpy())}; examples won {shares}; "
                  f"{time.time() - start:.0f}s", flush=True)
            won_total, examples = 0, 0
    for run, (trained, _, path) in zip(args.runs, members):
        out = os.path.join(args.out, os.path.basename(os.path.normpath(run)))
        steps = int(path.rsplit("-", 1)[1]) + args.steps
        save_run(trained.model, trained.config, run, out, steps)
        print(f"-> {out} (step {steps:,})")
    print(f"trained {len(models)} members jointly ({args.objective}) {args.steps} steps in {time.time() - start:.0f}s")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
