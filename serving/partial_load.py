"""Load only some signatures of a SavedModel: a version serves ``serving_default`` sooner.

``tf.saved_model.load`` rebuilds every function of the SavedModel's library in Python
(holding the GIL), about linearly in graph ops: for an exported E2E model 28,000 ops of
which ``serving_default`` needs 7,200 (``explain`` and ``generate`` hold the rest). Here a
copy of ``saved_model.pb`` keeps the signatures asked for and the functions they reach; the
object graph keeps its node ids (dropped functions become empty objects), so the checkpoint
restores the same variables, and the copy sits in a scratch directory beside links to
the version's ``variables/`` and ``assets/``. The scratch directory is removed once
loaded (variables and vocabulary tables are read at load time). The full SavedModel is
loaded later for the other signatures (serving.model_manager).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Iterable, Set

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

SAVED_MODEL_PB = "saved_model.pb"
LINKED = ("variables", "assets", "fingerprint.pb")


def _node_functions(node) -> Set[str]:
    """Functions a node names through its func / list-of-func attributes."""
    names = {value.func.name for value in node.attr.values() if value.func.name}
    for value in node.attr.values():
        names.update(f.name for f in value.list.func)
    return names


def _called_functions(function_def, library: Set[str]) -> Set[str]:
    """Library functions a FunctionDef calls (as an op type or through a func attr)."""
    called = set()
    for node in function_def.node_def:
        called |= _node_functions(node) | {node.op}
    return called & library


def _reachable(roots: Iterable[str], functions) -> Set[str]:
    names, seen, stack = set(functions), set(), list(roots)
    while stack:
        name = stack.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        stack.extend(_called_functions(functions[name], names) - seen)
    return seen


def prune_saved_model(saved_model: saved_model_pb2.SavedModel, keep: Iterable[str]) -> saved_model_pb2.SavedModel:
    """A copy of a TF2 SavedModel with only the signatures ``keep`` (and every other object)."""
    pruned = saved_model_pb2.SavedModel()
    pruned.CopyFrom(saved_model)
    meta_graph = pruned.meta_graphs[0]
    graph = meta_graph.object_graph_def
    keep = set(keep)
    dropped_keys = [key for key in meta_graph.signature_def if key not in keep and not key.startswith("__")]
    signature_map = next((node for node in graph.nodes if node.WhichOneof("kind") == "user_object"
                          and node.user_object.identifier == "signature_map"), None)
    if signature_map is None:  # e.g. a TF1 SavedModel: no object graph
        raise ValueError("the SavedModel has no signature map in its object graph")
    functions = {f.signature.name: f for f in meta_graph.graph_def.library.function}
    wrappers = {graph.nodes[child.node_id].bare_concrete_function.concrete_function_name
                for child in signature_map.children if child.local_name in dropped_keys}
    # A dropped signature's wrapper and the traced function it calls (e.g. __inference__explain).
    dropped = wrappers | set().union(*(_called_functions(functions[w], set(functions)) for w in wrappers))
    for node in graph.nodes:
        kind = node.WhichOneof("kind")
        names = (set(node.function.concrete_functions) if kind == "function" else
                 {node.bare_concrete_function.concrete_function_name} if kind == "bare_concrete_function" else
                 # a tensor of a dropped function's graph held by an object (e.g. a Keras layer's)
                 {node.captured_tensor.concrete_function} if kind == "captured_tensor" else set())
        if names and names <= dropped:
            node.Clear()  # an empty object in its place keeps every node id
            node.user_object.identifier = "_generic_user_object"
    children = [c for c in signature_map.children if c.local_name not in dropped_keys]
    del signature_map.children[:]
    signature_map.children.extend(children)
    for key in dropped_keys:
        del meta_graph.signature_def[key]
    roots = set()
    for node in graph.nodes:
        kind = node.WhichOneof("kind")
        if kind == "function":
            roots.update(node.function.concrete_functions)
        elif kind == "bare_concrete_function":
            roots.add(node.bare_concrete_function.concrete_function_name)
    kept = _reachable(roots | _graph_functions(meta_graph.graph_def, dropped), functions)
    library = meta_graph.graph_def.library
    kept_functions = [f for f in library.function if f.signature.name in kept]
    del library.function[:]
    library.function.extend(kept_functions)
    kept_gradients = [g for g in library.gradient if g.function_name in kept]
    del library.gradient[:]
    library.gradient.extend(kept_gradients)
    for name in [name for name in graph.concrete_functions if name not in kept]:
        del graph.concrete_functions[name]
    nodes = [n for n in meta_graph.graph_def.node if not (_node_functions(n) & dropped)]
    del meta_graph.graph_def.node[:]
    meta_graph.graph_def.node.extend(nodes)
    return pruned


def _graph_functions(graph_def, dropped: Set[str]) -> Set[str]:
    """Functions the MetaGraph's own nodes call (e.g. the init op's), except dropped ones."""
    names = set()
    for node in graph_def.node:
        names |= _node_functions(node)
    return names - dropped


def load_signatures(export_dir: str, keep: Iterable[str], load: Callable = tf.saved_model.load):
    """``load`` (tf.saved_model.load, or serving.session_runtime's) of ``export_dir`` with
    only the signatures ``keep``."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, SAVED_MODEL_PB), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    scratch = tempfile.mkdtemp(prefix="partial-load-")
    try:
        with open(os.path.join(scratch, SAVED_MODEL_PB), "wb") as handle:
            handle.write(prune_saved_model(saved_model, keep).SerializeToString())
        for name in LINKED:
            if os.path.exists(os.path.join(export_dir, name)):
                os.symlink(os.path.abspath(os.path.join(export_dir, name)), os.path.join(scratch, name))
        return load(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
