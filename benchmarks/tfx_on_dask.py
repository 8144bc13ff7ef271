"""Check + timing: the TFX pipeline's Beam components (TableExampleGen, StatisticsGen) on a
local dask.distributed cluster (2 worker processes, loopback) against the DirectRunner, on
the tiny E2E pipeline input of tfx_pipeline/pipeline_e2e_test.py. Prints both run times and
whether the examples (as a multiset) and the per-feature statistics counts are equal.

    .venv/bin/python benchmarks/tfx_on_dask.py
"""

import glob
import os
import pathlib
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def run_components(work: str, beam_args, tag: str) -> str:
    """ExampleGen + StatisticsGen with `beam_args` (through the pipeline config); returns the root."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx import v1 as tfx

    from tfx_pipeline import components
    from tfx_pipeline import config as pipeline_config
    from tfx_pipeline.pipeline_e2e_test import tiny_overrides

    raw = pipeline_config.deep_merge(pipeline_config.load_raw(), tiny_overrides(pathlib.Path(work)))
    raw["pipeline"].update(beam_pipeline_args=list(beam_args), root=os.path.join(work, f"root-{tag}"))
    config = pipeline_config.from_raw(raw)
    print(f"{tag}: beam_pipeline_args {config.beam_pipeline_args}", flush=True)
    example_gen = components.table_example_gen(config.input_base, config.splits, config.lowercase, tag)
    statistics = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    metadata = metadata_store_pb2.ConnectionConfig()
    metadata.sqlite.filename_uri = os.path.join(work, f"{tag}.sqlite")
    metadata.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    pipeline = tfx.dsl.Pipeline(pipeline_name=f"dask-check-{tag}", pipeline_root=config.root,
                                components=[example_gen, statistics], enable_cache=False,
                                metadata_connection_config=metadata, beam_pipeline_args=config.beam_pipeline_args)
    start = time.time()
    tfx.orchestration.LocalDagRunner().run(pipeline)
    print(f"{tag}: ExampleGen + StatisticsGen in {time.time() - start:.1f} s", flush=True)
    return config.root


def examples(root: str):
    import tensorflow as tf

    found = {}
    for split in ("train", "eval"):
        files = sorted(glob.glob(os.path.join(root, "TableExampleGen", "examples", "*", f"Split-{split}", "*.gz")))
        found[split] = sorted(tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
                              for r in tf.data.TFRecordDataset(files, compression_type="GZIP"))
    return found


def statistics(root: str):
    import tensorflow_data_validation as tfdv

    found = {}
    for path in sorted(glob.glob(os.path.join(root, "StatisticsGen", "statistics", "*", "Split-*", "FeatureStats.pb"))):
        split = path.split("Split-")[1].split(os.sep)[0]
        stats = tfdv.load_stats_binary(path)
        found[split] = sorted((f.path.step[0], _rounded(str(f))) for d in stats.datasets for f in d.features)
    return found


def _rounded(text: str) -> str:
    """Floats to 12 significant digits: a runner sums in another order (std_dev's last digits)."""
    return re.sub(r"-?\d+\.\d+(e[-+]?\d+)?", lambda m: f"{float(m.group()):.12g}", text)


def main() -> None:
    from dask.distributed import LocalCluster

    from tfx_pipeline.pipeline_e2e_test import add_span

    with tempfile.TemporaryDirectory() as work:
        add_span(os.path.join(work, "input"), 1)
        direct = run_components(work, ["--direct_running_mode=in_memory", "--direct_num_workers=1"], "direct")
        cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                               dashboard_address=None, local_directory=os.path.join(work, "dask"))
        try:
            on_dask = run_components(
                work, ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"], "dask")
        finally:
            cluster.close()
        a, b = examples(direct), examples(on_dask)
        print(f"examples equal: {a == b} ({', '.join(f'{k} {len(v)}' for k, v in a.items())})")
        sa, sb = statistics(direct), statistics(on_dask)
        print(f"statistics equal (every feature's FeatureNameStatistics, floats to 12 digits): {sa == sb}")
        if sa != sb:
            import difflib

            for split in sa:
                for (name, x), (_, y) in zip(sa[split], sb.get(split, [])):
                    if x != y:
                        print(f"  {split}/{name}:", "".join(list(difflib.unified_diff(
                            x.splitlines(True), y.splitlines(True), n=0))[2:12]))
        if a != b or sa != sb:
            sys.exit(1)


if __name__ == "__main__":
    main()
