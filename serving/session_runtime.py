"""Signatures run in a TF1 session, as TF Serving runs them (``tablegen serve --runtime session``).

TF Serving's loader (SavedModelBundle) imports the meta graph into a session, runs the
saver's restore op and the init op, and answers a request with ``Session.run`` by the
SignatureDef's tensor names. ``tf.saved_model.load`` instead rebuilds every function of
the library as a Python graph: 220,000-280,000 Python objects for a real export (load time
under the GIL, and a full collection of 0.8-1.2 s when the version is unloaded, which
stalls every request; benchmarks/serving_load.py --swap-timeline shows it). A session holds
about 4,700. Same graphs, same kernels, same text; errors raise the same tf.errors classes.

``SessionFunction`` has what serving.signatures.Signature reads of a ConcreteFunction:
``structured_input_signature``, ``structured_outputs`` and a call by input name.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List, Mapping

import numpy as np
import tensorflow as tf
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.saved_model import loader_impl

SERVE_TAG = "serve"
# Nodes that run a function of the library with the ConfigProto in their `config_proto` attr.
FUNCTION_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")

# Every session's inter-op thread pools, shared by all versions (process-wide, by name):
# requests run on the first (a run's default), warm-up calls on the second. A warm-up's ops run on pool
# threads, not on the loading thread, so only a pool of their own lets `--loader-niceness`
# reach them: a new version's first calls then take the cores the requests leave.
POOLS = ("tablegen-requests", "tablegen-warmup")
WARMUP_POOL = 1
WARMUP_POOL_THREADS = 2
WARMUP_POOL_THREAD_NAME = f"tf_Compute{WARMUP_POOL}"  # TF names pool i's threads tf_Compute<i>


def _spec(key: str, info) -> tf.TensorSpec:
    return tf.TensorSpec(tf.TensorShape(info.tensor_shape), tf.as_dtype(info.dtype), name=key)


def _grappler_disabled() -> bool:
    return bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer"))


def session_config() -> tf.compat.v1.ConfigProto:
    """The process's Grappler switch (tablegen serve --graph-optimization sets it for
    functions) applied to a session too, so both runtimes optimise alike."""
    config = tf.compat.v1.ConfigProto()
    if _grappler_disabled():
        config.graph_options.rewrite_options.disable_meta_optimizer = True
    for index, name in enumerate(POOLS):  # num_threads 0: the default inter-op size (the cores)
        pool = config.session_inter_op_thread_pool.add(global_name=name)
        if index == WARMUP_POOL:
            pool.num_threads = WARMUP_POOL_THREADS
    return config


def warmup_pool_threads() -> List[int]:
    """Thread ids of the warm-up pool (Linux /proc; none elsewhere or before a session ran)."""
    ids = []
    for task in glob.glob("/proc/self/task/*"):
        try:
            with open(os.path.join(task, "comm")) as handle:
                if handle.read().strip() == WARMUP_POOL_THREAD_NAME:
                    ids.append(int(os.path.basename(task)))
        except (OSError, ValueError):
            continue  # the thread ended
    return ids


def set_warmup_pool_niceness(niceness: int) -> None:
    """The warm-up pool's threads take ``niceness``."""
    for thread_id in warmup_pool_threads():
        try:
            os.setpriority(os.PRIO_PROCESS, thread_id, niceness)
        except OSError:  # lowering it again needs privileges: it stays where it was
            pass


def apply_grappler_switch(meta_graph) -> int:
    """Give every function call in ``meta_graph`` the process's Grappler switch.

    A session optimises a called function with the ConfigProto recorded in the call node
    when the model was traced (Grappler on), not with the session's: so with
    ``--graph-optimization`` off, the E2E export's first call still took 4.3-5.0 s in a
    session against 1.7 s as a TF2 function; with this, 3.1 s. Returns the nodes changed."""
    if not _grappler_disabled():
        return 0
    nodes = list(meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
        nodes.extend(function.node_def)
    changed = 0
    for node in nodes:
        if node.op not in FUNCTION_CALL_OPS:
            continue
        config = tf.compat.v1.ConfigProto()
        config.ParseFromString(node.attr["config_proto"].s)
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        node.attr["config_proto"].s = config.SerializeToString()
        changed += 1
    return changed


def detach_library(meta_graph):
    """-> the meta graph's function library, removed from it.

    Imported with the nodes, the library makes the import one C call holding the GIL,
    shape inference into every called function included: 193-213 ms for the E2E
    export's explain and generate, with every request waiting; and it leaves a Python
    wrapper per function (535 for a peer-size export), whose deletions in the full
    collection after an unload held the GIL 0.1-0.8 s more. The nodes alone import at
    once; ``add_functions`` then adds the functions one C call each.

    The library's gradients are dropped: a served graph is only run forward, and a
    gradient a signature computes was built into its graph at export. Every export with
    the fused LSTM loop (tablegen_tf.layers.fused_loop, a tf.custom_gradient) registers
    one, and keeping them meant importing the whole library the slow way."""
    library = meta_graph.graph_def.library
    detached = type(library)()
    detached.function.extend(library.function)
    meta_graph.graph_def.ClearField("library")
    return detached


def add_functions(graph: tf.Graph, library) -> None:
    """One C call per function (what tf.Graph._add_function does), so requests run between
    them; no Python wrapper per function is kept for the collector to walk."""
    for function_def in library.function:
        function = pywrap_tf_session.TF_FunctionImportFunctionDef(function_def.SerializeToString())
        try:
            with graph._c_graph.get() as c_graph:
                pywrap_tf_session.TF_GraphCopyFunction(c_graph, function, None)
        finally:
            pywrap_tf_session.TF_DeleteFunction(function)


class SessionFunction:
    """One SignatureDef as a callable: keyword inputs in, {output key: numpy array} out."""

    def __init__(self, session: tf.compat.v1.Session, signature_def):
        self._input_keys = sorted(signature_def.inputs)
        self._output_keys = sorted(signature_def.outputs)
        self.structured_input_signature = ((), {k: _spec(k, signature_def.inputs[k]) for k in self._input_keys})
        self.structured_outputs = {k: _spec(k, signature_def.outputs[k]) for k in self._output_keys}
        # A callable skips Session.run's per-call feed and fetch parsing.
        self._run = session.make_callable([signature_def.outputs[k].name for k in self._output_keys],
                                          feed_list=[signature_def.inputs[k].name for k in self._input_keys])

    def __call__(self, **inputs) -> Dict[str, np.ndarray]:
        return self._call(inputs)

    def warm_up(self, inputs: Mapping[str, np.ndarray], niceness: int) -> Dict[str, np.ndarray]:
        """A call on the warm-up pool, its threads at ``niceness``."""
        set_warmup_pool_niceness(niceness)
        return self._call(inputs, options=tf.compat.v1.RunOptions(inter_op_thread_pool=WARMUP_POOL))

    def _call(self, inputs: Mapping[str, np.ndarray], **run_options) -> Dict[str, np.ndarray]:
        values = self._run(*[np.asarray(inputs[key]) for key in self._input_keys], **run_options)
        return dict(zip(self._output_keys, values))


class SessionModel:
    """A SavedModel loaded into its own graph and session; ``signatures`` as tf.saved_model.load's."""

    def __init__(self, export_dir: str):
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph, config=session_config())
        try:
            # tf.compat.v1.saved_model.load's own loader, so the meta graph can be edited
            # before import; it maps asset files and runs the restore and init ops as TF
            # Serving's SavedModelBundle does.
            loader = loader_impl.SavedModelLoader(export_dir)
            meta_graph = loader.get_meta_graph_def_from_tags([SERVE_TAG])
            apply_grappler_switch(meta_graph)
            library = detach_library(meta_graph)
            with self.graph.as_default():  # SavedModelLoader.load's steps, the library between
                saver, _ = loader.load_graph(self.graph, [SERVE_TAG])
                add_functions(self.graph, library)
                loader.restore_variables(self.session, saver)
                loader.run_init_ops(self.session, [SERVE_TAG])
        except Exception:  # a corrupt or partial version: its session is not left open
            self.session.close()
            raise
        self.signatures = {key: SessionFunction(self.session, signature_def)
                           for key, signature_def in meta_graph.signature_def.items()
                           if not key.startswith("__")}  # e.g. __saved_model_init_op

    def close(self) -> None:
        self.session.close()
