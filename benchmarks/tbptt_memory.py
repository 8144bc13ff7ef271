"""Benchmark: peak memory of one training step on 300-token targets, with and
without truncated BPTT (t1 = t2 = 100), RotoWire-sized tables (600 records).

    .venv/bin/python benchmarks/tbptt_memory.py
Each variant runs in its own process; peak RSS of that process is reported.
"""

import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_step(tbptt: bool) -> dict:
    import tensorflow as tf

    from tablegen_tf.layers.tbptt import tbptt_loss_and_gradients
    from tablegen_tf.layers.testing import random_batch
    from tablegen_tf.models import build_model

    sizes = {"words": 10000, "fields": 40, "entities": 700, "groups": 4}
    batch = random_batch(batch_size=8, num_records=600, target_length=300, plan_length=4, max_position=30, sizes=sizes)
    model = build_model("encdec-copy", {"hidden_size": 256, "num_layers": 2, "word_dim": 256}, sizes,
                        {"max_position": 30})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if tbptt:
        loss, grads = tbptt_loss_and_gradients(model, batch, 100, 100)
    else:
        with tf.GradientTape() as tape:
            loss = model.compute_loss_from_batch(batch, training=True)
        grads = tape.gradient(loss, model.trainable_variables)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"loss": float(loss), "peak_mb": round(peak / 1024), "step_mb": round((peak - before) / 1024)}


def main() -> None:
    if len(sys.argv) > 1:
        print("RESULT " + json.dumps(one_step(sys.argv[1] == "tbptt")))
        return
    for variant in ("full", "tbptt"):
        proc = subprocess.run([sys.executable, __file__, variant], capture_output=True, text=True, cwd=ROOT)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if not lines:
            sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(lines[0][7:])
        label = "full BPTT" if variant == "full" else "TBPTT t1=t2=100"
        print(f"{label}: peak RSS {r['peak_mb']} MB (step added {r['step_mb']} MB), loss {r['loss']:.3f}")


if __name__ == "__main__":
    main()
