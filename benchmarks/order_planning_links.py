"""Experiment: does order-planning's link matrix L learn the order of fields?

Prints, for each from-field, L's off-diagonal ranking (L[from, to], eq. 8: row = the field
attended at t-1) beside the next fields of the training references, the rank correlation of
the two, the field order L implies (a greedy chain from the first field of most references)
beside the references' orders, and how often L's link attention picks the reference's next
field.  Reference orders (``--orders``):

* ``text``: the order in which the reference mentions the table's values, found by the E2E
  slot patterns of tablegen_tf.metrics.slot_metrics (paraphrases included: familyFriendly
  "yes" is "kid friendly", never the word "yes");
* ``values``: the content plan where the corpus has one, else the order in which the
  reference's tokens first match each field's value words (links.value_mention_order: longest
  run of value tokens, function words alone never count), for corpora that copy their values
  (WikiBio: multi-token names, dates, places);
* ``alignment``: the content plan, else the copy alignment of the prepared data (target
  tokens equal to a value token), consecutive repeats merged.  It misses every paraphrased
  value: on E2E it finds familyFriendly in 437 of 39,874 references, the text order in 20,740;
  a shared token ("," or a year) places every field holding it;
* ``auto`` (default): ``text`` for E2E-style tables, else ``values``.

With many fields (WikiBio) ``--fields N`` keeps the per-from-field rows, the measures on them
and the greedy order to the N fields most references mention; the next-field accuracy and
the top transitions overall (``--transitions K``) use every field.

    .venv/bin/python benchmarks/order_planning_links.py --model runs/op-e2e/t3_copy_hybrid \
        --data runs/data/e2e-sel/train
    .venv/bin/python benchmarks/order_planning_links.py --model runs/op-wikibio/copy_hybrid \
        --data runs/data/wikibio-sel/train --fields 15 --transitions 15
"""

import argparse
import collections
import glob
import os

import numpy as np
import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.constants import UNK_ID
from tablegen_tf.metrics import slot_metrics
from tablegen_tf.models.order_planning import links as link_report


def reference_orders(data_dir, limit, source="auto", vocabulary=None):
    """-> (orders, tables, used): per example its field order and {field: table tokens}.  With
    ``vocabulary`` (the model's field names) a field outside it is named <unk>, as the model sees it."""
    spec = {key: tf.io.VarLenFeature(tf.string) for key in (schema.RECORD_FIELD, schema.RECORD_VALUE,
                                                            schema.REFERENCES, schema.TARGET_TOKENS)}
    spec.update({key: tf.io.VarLenFeature(tf.int64) for key in (schema.CONTENT_PLAN, schema.COPY_INDICES)})
    files = sorted(glob.glob(os.path.join(data_dir, "examples-*.tfrecord*")))
    if not files:
        raise SystemExit(f"no examples-*.tfrecord* in {data_dir}")
    orders, tables, used = [], [], collections.Counter()
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").take(limit).map(
        lambda serialized: {k: tf.sparse.to_dense(v) for k, v in tf.io.parse_single_example(serialized, spec).items()})
    for parsed in dataset.as_numpy_iterator():
        fields = [f.decode() for f in parsed[schema.RECORD_FIELD]]
        values = [v.decode() for v in parsed[schema.RECORD_VALUE]]
        slots = slot_metrics.table_slots(fields, values)
        references = [r.decode() for r in parsed[schema.REFERENCES]]
        if source == "text" or (source == "auto" and slot_metrics.is_e2e_table(slots) and references):
            order = _text_order(slots, references[0] if references else "")
            used["text"] += 1
        elif source in ("auto", "values") and not len(parsed[schema.CONTENT_PLAN]):
            order = link_report.value_mention_order(fields, values, [t.decode() for t in parsed[schema.TARGET_TOKENS]])
            used["value words"] += 1
        else:
            order = _aligned_order(fields, parsed[schema.CONTENT_PLAN], parsed[schema.COPY_INDICES])
            used["alignment"] += 1
        if vocabulary is not None:
            known = set(vocabulary)
            order = [name if name in known else vocabulary[UNK_ID] for name in order]
            order = [name for k, name in enumerate(order) if not k or name != order[k - 1]]
            fields = [name if name in known else vocabulary[UNK_ID] for name in fields]
        orders.append(order)
        tables.append(collections.Counter(fields))
    return orders, tables, used


def _text_order(slots, text):
    positions = slot_metrics.realised_positions(slots, text)
    return sorted(positions, key=positions.get)


def _aligned_order(fields, plan, copy_indices):
    order = []
    for index in plan if len(plan) else copy_indices:  # no plan: the records realised by each target token
        if 0 <= index < len(fields) and (not order or order[-1] != fields[index]):
            order.append(fields[index])
    return order


def attention_tracking(trained, data_dir, count):
    """Teacher forced on ``count`` training examples, at the steps whose word copies a table value
    (copy alignment): how often the top field (attention summed per field) of the hybrid, content
    and link attention, and of the copy scores (eq. 15), is the field of that value; beside the
    field with the most table tokens (what L = 0 attends most).  -> (shares, steps)."""
    model, num_fields = trained.model, len(trained.vocabs.tokens["fields"])
    files = sorted(glob.glob(os.path.join(data_dir, "examples-*.tfrecord*")))
    serialized = list(tf.data.TFRecordDataset(files, compression_type="GZIP").take(count).as_numpy_iterator())
    hits, steps = collections.Counter(), 0
    for batch in trained.featurizer.ordered_batches(serialized, 64):
        predicted = model(batch, training=False, trace=True)
        outputs, memory = predicted["outputs"], predicted["memory"]
        tops = {label: outputs[k].numpy() for k, label in (("alpha", "attention alpha_t"), ("content", "alpha^content"),
                                                           ("link", "alpha^link")) if k in outputs}
        if model.copy_scores is not None:
            scores = model.copy_scores(outputs["states"], memory["copy_keys"], memory["memory_mask"])
            tops["copy scores"] = tf.nn.softmax(tf.where(memory["memory_mask"][:, None, :], scores, -1e9)).numpy()
        field_ids, record_mask = batch["record_field"].numpy(), batch["record_mask"].numpy()
        copy_mask = batch["copy_mask"].numpy()
        for b in range(len(field_ids)):
            one_hot = np.eye(num_fields)[field_ids[b]] * record_mask[b][:, None]  # [C, fields]
            per_field = {k: v[b] @ one_hot for k, v in tops.items()}  # [T, fields]
            most_tokens = one_hot.sum(0).argmax()
            for t in np.nonzero(copy_mask[b].any(-1))[0]:
                gold = set(field_ids[b][copy_mask[b, t] > 0])
                steps += 1
                hits["field with the most tokens"] += most_tokens in gold
                for k, v in per_field.items():
                    if v[t].any():  # a model without content attention traces zeros
                        hits[k] += v[t].argmax() in gold
    return {k: n / max(steps, 1) for k, n in hits.items()}, steps


def _pairs(left, right, width=34):
    """Two columns of (name, value) lists, one line per rank."""
    rows = []
    for k in range(max(len(left), len(right))):
        a = left[k] if k < len(left) else ""
        b = right[k] if k < len(right) else ""
        rows.append(f"{a:<{width}s}{b}")
    return rows


def print_rows(matrix, field_ids, transitions, top):
    reports = link_report.row_reports(matrix, field_ids, transitions)
    print(f"\n{'from field':<16s}{'rho':>6s}  {'largest L[from, to]':<34s}most frequent next field in references")
    for report in reports:
        learnt = [f"{n} {v:+.3f}" for n, v in report.learnt[:top]]
        reference = [f"{n} {share:.0%}" for n, share in report.reference[:top]]
        for k, line in enumerate(_pairs(learnt, reference)):
            head = f"{report.field:<16s}{report.rho:+6.2f}  " if k == 0 else " " * 24
            print(head + line)
    transposed = link_report.row_reports(matrix.T, field_ids, transitions)
    for label, rows in (("L", reports), ("L transposed", transposed)):
        hits = sum(r.argmax_agrees for r in rows)
        print(f"{label:>12s}: largest entry = most frequent next field for {hits}/{len(rows)} from-fields, "
              f"mean rank correlation {np.nanmean([r.rho for r in rows]):+.2f}")
    reference_logp = link_report.log_next_field_probabilities(transitions, field_ids, len(matrix))
    print(f"a per-to-field constant explains {link_report.column_share(matrix, field_ids):.0%} of L's "
          f"off-diagonal variance (of the references' log P(next | from): "
          f"{link_report.column_share(reference_logp, field_ids):.0%})")
    rho, hits = link_report.transition_agreement(matrix, reference_logp, field_ids)
    print(f"without each side's per-to-field means: mean row rank correlation {rho:+.2f}, "
          f"largest entry agrees for {hits}/{len(field_ids)} from-fields")


def print_top_transitions(matrix, field_ids, transitions, count):
    """L's largest off-diagonal entries beside the references' most frequent transitions, each
    with its rank on the other side."""
    learnt = link_report.top_transitions(matrix, field_ids, len(field_ids) ** 2)
    learnt_rank = {(a, b): k + 1 for k, (a, b, _) in enumerate(learnt)}
    counted = sorted(((pair, n) for pair, n in transitions.items() if pair[0] != pair[1]
                      and pair[0] in field_ids and pair[1] in field_ids), key=lambda item: (-item[1], item[0]))
    reference_rank = {pair: k + 1 for k, (pair, _) in enumerate(counted)}
    total = sum(n for _, n in counted)
    print(f"\ntop {count} transitions over {len(field_ids)} fields "
          f"(rank on the other side; {len(learnt):,} off-diagonal entries, {len(counted):,} distinct reference ones)")
    left = [f"{a} > {b} {v:+.3f} (ref. #{reference_rank.get((a, b), '-')})" for a, b, v in learnt[:count]]
    right = [f"{a} > {b} {n / total:.1%} (L #{learnt_rank[(a, b)]})" for (a, b), n in counted[:count]]
    print(f"{'largest L[from, to]':<52s}most frequent in references")
    for line in _pairs(left, right, width=52):
        print(line)
    shared = {(a, b) for a, b, _ in learnt[:count]} & {pair for pair, _ in counted[:count]}
    print(f"{len(shared)}/{count} of L's top {count} are among the references' top {count}")


def print_accuracy(matrix, field_ids, transitions, tables, orders):
    print("\nnext-field accuracy over the reference transitions (the field with the most link attention "
          "when alpha_{t-1} is on the from-field):")
    log_counts = np.full(matrix.shape, -1e9)
    for (a, b), n in transitions.items():
        log_counts[field_ids[a], field_ids[b]] = np.log(n)
    for label, scored, weigh in (("learnt L", matrix, True), ("L transposed", matrix.T, True),
                                 ("L = 0 (most table tokens)", np.zeros_like(matrix), True),
                                 ("reference counts (in-sample bound)", log_counts, False)):
        accuracy = link_report.next_field_accuracy(scored, field_ids, tables, orders, weigh_tokens=weigh)
        print(f"  {label:<36s}{accuracy:.1%}")


def print_orders(matrix, field_ids, orders, projected=False):
    """``projected``: whole orders are also shown with only the fields of ``field_ids``."""
    start = collections.Counter(order[0] for order in orders if order and order[0] in field_ids).most_common(1)[0][0]
    positions = link_report.mean_relative_positions(orders)
    chain = link_report.greedy_chain(matrix, field_ids, start)
    by_position = sorted((n for n in positions if n in field_ids), key=positions.get)
    rho = link_report.rank_correlation([chain.index(n) for n in by_position], range(len(by_position)))
    print(f"\nfield order implied by L (greedy from {start}): {' > '.join(chain)}")
    print("fields by mean relative position in references: "
          + " > ".join(f"{n} {positions[n]:.2f}" for n in by_position))
    print(f"rank correlation of the two orders: {rho:+.2f}")
    print("most frequent field orders in the references:")
    counted = collections.Counter(" > ".join(order) for order in orders)
    for order, count in counted.most_common(5):
        print(f"  {count / len(orders):5.1%}  {order}")
    if projected:
        print(f"the same with only those {len(field_ids)} fields:")
        kept = collections.Counter(" > ".join(n for n in order if n in field_ids) for order in orders)
        for order, count in kept.most_common(5):
            print(f"  {count / len(orders):5.1%}  {order}")


def frequent_fields(field_ids, orders, count):
    """``field_ids`` cut to the ``count`` fields most orders mention (all when 0), most first."""
    if not count:
        return field_ids
    mentions = collections.Counter(name for order in orders for name in set(order) if name in field_ids)
    return {name: field_ids[name] for name, _ in mentions.most_common(count)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an order-planning run directory")
    parser.add_argument("--data", required=True, help="prepared training directory")
    parser.add_argument("--orders", choices=("auto", "text", "values", "alignment"), default="auto")
    parser.add_argument("--limit", type=int, default=0, help="examples to read (0 = all)")
    parser.add_argument("--top", type=int, default=3, help="next fields shown per from-field")
    parser.add_argument("--fields", type=int, default=0,
                        help="rows, their measures and the greedy order for the N fields most references "
                             "mention (0 = every field)")
    parser.add_argument("--transitions", type=int, default=0, help="show L's K largest transitions (0 = none)")
    parser.add_argument("--attention", type=int, default=512,
                        help="training examples to check the model's attention on (0 = skip)")
    args = parser.parse_args()
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(args.model)
    if trained.model.link_attention is None:
        raise SystemExit(f"{args.model}: model.attention={trained.model.attention} has no link matrix")
    names = trained.vocabs.tokens["fields"]
    matrix = trained.model.link_attention.link.numpy()
    orders, tables, used = reference_orders(args.data, args.limit or -1, args.orders, names)
    seen = {name for table in tables for name in table}
    field_ids = {name: i for i, name in enumerate(names) if name in seen}  # ids as the model looks them up
    transitions = link_report.count_transitions(orders)
    print(f"reference orders: {', '.join(f'{k} {n:,}' for k, n in used.items())} examples, "
          f"{sum(transitions.values()):,} transitions; L[from, to] = eq. 8's L[f_j, f_i], diagonal left out")
    shown = frequent_fields(field_ids, orders, args.fields)
    if len(shown) < len(field_ids):
        mentions = collections.Counter(name for order in orders for name in set(order))
        print(f"rows for the {len(shown)} of {len(field_ids)} fields most references mention: "
              + ", ".join(f"{n} {mentions[n] / len(orders):.0%}" for n in shown))
    print_rows(matrix, shown, transitions, args.top)
    if args.transitions:
        print_top_transitions(matrix, field_ids, transitions, args.transitions)
    print_accuracy(matrix, field_ids, transitions, tables, orders)
    print_orders(matrix, shown, orders, projected=len(shown) < len(field_ids))
    if args.attention:
        shares, steps = attention_tracking(trained, args.data, args.attention)
        print(f"\ntop field at the {steps:,} steps that copy a table value ({args.attention} training examples, "
              "teacher forced) = that value's field:")
        print("  " + ", ".join(f"{k} {v:.1%}" for k, v in shares.items()))
    real = list(field_ids.values())
    diagonal = np.mean([matrix[j, j] for j in real])
    off = np.mean([matrix[j, i] for j in real for i in real if i != j])
    print(f"\nL over the {len(real)} fields: mean diagonal {diagonal:+.3f}, mean off-diagonal {off:+.3f}, "
          f"largest |L| {np.abs(matrix[np.ix_(real, real)]).max():.3f}")


if __name__ == "__main__":
    main()
