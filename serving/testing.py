"""Small stand-in SavedModels for the serving tests and the load benchmark.

The real exporter (trained encoder-decoder -> SavedModel) is written elsewhere;
the serving stack only relies on the signature contract, so these modules
implement that contract with a few string ops:

* ``serving_default``: ``tables`` (tf.string [batch]) -> ``text`` (the table's
  values joined by spaces, plus an optional suffix that tells versions apart)
  and ``score`` (float32 [batch]);
* ``generate``: the same plus ``beam_size``, ``max_length`` (int32 scalars) and
  ``must_include`` (tf.string [batch, n]), appended to the text.

Strings that do not look like ``{"table": [{...}, ...]}`` fail inside the graph
with ``InvalidArgumentError``, as the real model's parser does. ``decoder_steps``
adds a batched matmul loop so the benchmark has per-call compute that, like a
real decoder, gets cheaper per table when requests are batched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import List

import tensorflow as tf

MODEL = "tablegen"
TABLE_PATTERN = r'\s*\{\s*"table"\s*:\s*\[\s*\{.*\}\s*\]\s*\}\s*'


def table_json(*pairs: str) -> str:
    """table_json("name", "The Vaults", "eatType", "pub") -> the JSONL table form."""
    records = [{"field": f, "value": v} for f, v in zip(pairs[::2], pairs[1::2])]
    return json.dumps({"table": records})


def expected_text(table: str, suffix: str = "") -> str:
    """What the fake model returns for ``table`` (computed in Python, for assertions)."""
    return " ".join([r["value"] for r in json.loads(table)["table"]] + ([suffix] if suffix else []))


class FakeTableModel(tf.Module):
    def __init__(self, suffix: str = "", decoder_steps: int = 0, width: int = 128, vocab: int = 0):
        super().__init__()
        self.suffix = tf.Variable(suffix, trainable=False)
        self.decoder_steps = decoder_steps
        self.weights = tf.Variable(tf.random.stateless_normal([width, width], [1, 2]) / width**0.5)
        self.projection = tf.Variable(tf.random.stateless_normal([width, max(vocab, 1)], [3, 4]))

    def _text_and_score(self, tables):
        looks_like_table = tf.strings.regex_full_match(tables, TABLE_PATTERN)
        tf.debugging.assert_equal(
            tf.reduce_all(looks_like_table), True,
            message='tables must be JSON objects {"table": [{"field": ..., "value": ...}, ...]}')
        # Drop field names and the "table" key so only "value" strings remain quoted.
        text = tf.strings.regex_replace(tables, r'"field"\s*:\s*"[^"]*"', "")
        text = tf.strings.regex_replace(text, r'"table"', "")
        text = tf.strings.regex_replace(text, r'[^"]*"value"\s*:\s*"([^"]*)"[^"]*', r"\1 ")
        text = tf.strings.strip(tf.strings.join([text, self.suffix]))
        return text, self._decode_score(tables) + tf.cast(tf.strings.length(text), tf.float32)

    def _decode_score(self, tables):
        """Stand-in for a decoder loop: per step a [batch, width] recurrence and a
        projection onto `vocab` logits, like an RNN decoder with its output layer."""
        def step(i, s):
            logits = tf.matmul(s, self.projection)
            return i + 1, tf.tanh(tf.matmul(s, self.weights) + tf.reduce_max(logits, 1, keepdims=True))

        state = tf.ones([tf.shape(tables)[0], self.weights.shape[0]])
        _, state = tf.while_loop(lambda i, _: i < self.decoder_steps, step, (tf.constant(0), state))
        return tf.reduce_mean(state, axis=1) * 0.0

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="tables")])
    def serve(self, tables):
        text, score = self._text_and_score(tables)
        return {"text": text, "score": score}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="tables"),
        tf.TensorSpec([], tf.int32, name="beam_size"),
        tf.TensorSpec([], tf.int32, name="max_length"),
        tf.TensorSpec([None, None], tf.string, name="must_include"),
    ])
    def generate(self, tables, beam_size, max_length, must_include):
        text, score = self._text_and_score(tables)
        extra = tf.strings.reduce_join(must_include, axis=1, separator=" ")
        text = tf.strings.strip(tf.strings.join([text, extra], separator=" "))
        text = tf.strings.substr(text, 0, max_length)
        return {"text": text, "score": score + tf.cast(beam_size, tf.float32)}


def save_fake_model(export_dir: str, suffix: str = "", decoder_steps: int = 0,
                    width: int = 128, vocab: int = 0) -> str:
    module = FakeTableModel(suffix, decoder_steps, width, vocab)
    tf.saved_model.save(module, export_dir,
                        signatures={"serving_default": module.serve, "generate": module.generate})
    return export_dir


def push_version(source_dir: str, model_dir: str, version: int) -> str:
    """Publish like TFX Pusher: copy next to the target, then rename into place."""
    os.makedirs(model_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=model_dir)
    shutil.rmtree(staging)
    shutil.copytree(source_dir, staging)
    target = os.path.join(model_dir, str(version))
    os.rename(staging, target)
    return target


def sample_tables(count: int) -> List[str]:
    names = ["The Vaults", "The Eagle", "Aromi", "Zizzi", "Cotto", "Giraffe", "Strada"]
    kinds = ["pub", "coffee shop", "restaurant"]
    return [table_json("name", names[i % len(names)], "eatType", kinds[i % len(kinds)],
                       "area", "riverside" if i % 2 else "city centre") for i in range(count)]


def serve_args(base_path: str, *extra: str) -> argparse.Namespace:
    """`tablegen serve` arguments for a test server on free local ports."""
    from serving import server

    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    return parser.parse_args(["--model-base-path", base_path, "--model-name", MODEL,
                              "--host", "127.0.0.1", "--port", "0", "--rest-port", "0",
                              "--poll-seconds", "0.1", "--grace-seconds", "10", *extra])


class ServerProcess:
    """`python -m serving.server` (or ``command``, e.g. ``("-m", "tablegen_cli.main", "serve")``)
    in a subprocess (for RSS, crash and soak checks, the browser test): started on free
    ports, ready when it prints its "ready" line, stopped with SIGTERM."""

    def __init__(self, base_path: str, *flags: str, timeout: float = 120.0, command=("-m", "serving.server")):
        import queue
        import subprocess
        import sys
        import threading
        import time

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.process = subprocess.Popen(
            [sys.executable, *command, "--model-base-path", base_path,
             "--model-name", MODEL, "--host", "127.0.0.1", "--port", "0", "--rest-port", "0", *flags],
            cwd=root, env={**os.environ, "PYTHONPATH": root, "TF_CPP_MIN_LOG_LEVEL": "2"},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.process.stdout],
                         daemon=True).start()
        deadline = time.time() + timeout
        while time.time() < deadline and self.process.poll() is None:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith("tablegen serve: ready"):
                fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
                self.grpc_address, self.rest_address = fields["grpc"], fields["rest"]
                return
        self.stop()
        raise RuntimeError(f"server did not start (exit code {self.process.poll()}); run "
                           "`python -m serving.server ...` by hand to see why")

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {self.pid}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        import subprocess

        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def make_certificates(directory: str, server_names=("tablegen.test",)) -> dict:
    """A throwaway CA, a server certificate (for `server_names` and 127.0.0.1) and a
    client certificate signed by it, plus a client certificate from an unrelated CA;
    PEM files in `directory`. Returns {name: path}."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(common_name, issuer=None, ca=False, sans=(), usage=None):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        issuer_name, issuer_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        if usage:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256()), key

    ca = certificate("tablegen test CA", ca=True)
    other_ca = certificate("unrelated CA", ca=True)
    sans = [x509.DNSName(n) for n in server_names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    issued = {"ca": ca, "server": certificate("server", ca, sans=sans, usage=ExtendedKeyUsageOID.SERVER_AUTH),
              "client": certificate("client", ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
              "stranger": certificate("stranger", other_ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)}
    paths = {}
    for name, (cert, key) in issued.items():
        paths[f"{name}_cert"] = os.path.join(directory, f"{name}.crt")
        paths[f"{name}_key"] = os.path.join(directory, f"{name}.key")
        with open(paths[f"{name}_cert"], "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(paths[f"{name}_key"], "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return paths
