"""Experiment: does order-planning's link matrix L learn the order of fields?

Prints the field transitions with the largest learnt L[f_j, f_i] beside the most frequent
field transitions and whole field orders in the training references (from the content
plan / alignment of the prepared data: the fields of the plan's records, consecutive
repeats merged).

    .venv/bin/python benchmarks/order_planning_links.py --model runs/e2e/t3_copy_hybrid \
        --data /work/main/runs/data/e2e/train
"""

import argparse
import collections
import glob
import os

import numpy as np
import tensorflow as tf

from tablegen_tf import schema


def reference_orders(data_dir, limit):
    spec = {schema.RECORD_FIELD: tf.io.VarLenFeature(tf.string),
            schema.CONTENT_PLAN: tf.io.VarLenFeature(tf.int64),
            schema.COPY_INDICES: tf.io.VarLenFeature(tf.int64)}
    files = sorted(glob.glob(os.path.join(data_dir, "examples-*.tfrecord*")))
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").take(limit)
    orders = collections.Counter()
    transitions = collections.Counter()
    for serialized in dataset:
        parsed = tf.io.parse_single_example(serialized, spec)
        fields = [f.decode() for f in tf.sparse.to_dense(parsed[schema.RECORD_FIELD]).numpy()]
        plan = tf.sparse.to_dense(parsed[schema.CONTENT_PLAN]).numpy()
        if not len(plan):  # no plan stored: the alignment (records realised by each target token, in order)
            plan = tf.sparse.to_dense(parsed[schema.COPY_INDICES]).numpy()
        order = []
        for index in plan:
            if 0 <= index < len(fields) and (not order or order[-1] != fields[index]):
                order.append(fields[index])
        orders[" > ".join(order)] += 1
        transitions.update(zip(order, order[1:]))
    return orders, transitions


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an order-planning run directory")
    parser.add_argument("--data", required=True, help="prepared training directory")
    parser.add_argument("--limit", type=int, default=0, help="examples to read (0 = all)")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(args.model)
    names = trained.vocabs.tokens["fields"]
    matrix = trained.model.link_attention.link.numpy()
    orders, transitions = reference_orders(args.data, args.limit or -1)
    total = sum(transitions.values())
    real = range(3, len(names))  # skip <pad> <unk> <none>
    links = sorted(((matrix[j, i], names[j], names[i]) for j in real for i in real if i != j), reverse=True)
    print(f"largest off-diagonal L[from, to]          | most frequent transitions in references (n={total})")
    frequent = transitions.most_common(args.top)
    for k in range(args.top):
        left = f"{links[k][1]:>15s} -> {links[k][2]:<15s} {links[k][0]:+.3f}" if k < len(links) else ""
        right = (f"{frequent[k][0][0]:>15s} -> {frequent[k][0][1]:<15s} {frequent[k][1] / total:.1%}"
                 if k < len(frequent) else "")
        print(f"{left:46s} | {right}")
    # rank agreement: for each from-field, is the reference's most frequent next field L's argmax?
    hits = rows = 0
    for j in real:
        following = {b: n for (a, b), n in transitions.items() if a == names[j]}
        if not following:
            continue
        rows += 1
        best_l = names[max((i for i in real if i != j), key=lambda i: matrix[j, i])]
        hits += best_l == max(following, key=following.get)
    print(f"\nfrom-fields whose largest L entry is the most frequent next field in references: {hits}/{rows}")
    print("\nmost frequent field orders in the training references:")
    for order, count in orders.most_common(8):
        print(f"  {count / sum(orders.values()):5.1%}  {order}")
    self_links = np.mean([matrix[j, j] for j in real])
    print(f"\nmean diagonal L[f, f] = {self_links:+.3f} (staying on a field), mean off-diagonal = "
          f"{np.mean([matrix[j, i] for j in real for i in real if i != j]):+.3f}")


if __name__ == "__main__":
    main()
