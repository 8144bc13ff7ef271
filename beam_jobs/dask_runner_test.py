"""The Dask runner on an in-process dask.distributed cluster: each Beam feature our jobs use,
including the ones Beam 2.77's own DaskRunner gets wrong (see dask_runner.py)."""

import glob
import os

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from beam_jobs.dask_runner import DaskRunner


@pytest.fixture(scope="module")
def address():
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _pipeline(address, npartitions=3):
    return beam.Pipeline(runner=DaskRunner(), options=PipelineOptions(
        [f"--dask_client_address={address}", f"--dask_npartitions={npartitions}"]))


class _SplitAndCount(beam.DoFn):
    """Evens to the main output, odds tagged, one marker per bundle from finish_bundle."""

    def __init__(self):
        self.seen = Metrics.counter("test", "seen")

    def process(self, number):
        self.seen.inc()
        if number % 2:
            yield beam.pvalue.TaggedOutput("odd", number)
        else:
            yield number

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        yield WindowedValue("bundle", 0, [GlobalWindow()])


def test_tagged_outputs_finish_bundle_outputs_and_metrics(address):
    pipeline = _pipeline(address)
    split = (pipeline | beam.Create(range(10)) | beam.ParDo(_SplitAndCount()).with_outputs("odd", main="even"))
    assert_that(split.even | "Numbers" >> beam.Filter(lambda x: x != "bundle"), equal_to([0, 2, 4, 6, 8]),
                label="even")
    assert_that(split.odd, equal_to([1, 3, 5, 7, 9]), label="odd")
    assert_that(split.even | "Markers" >> beam.Filter(lambda x: x == "bundle") | beam.combiners.Count.Globally(),
                equal_to([3]), label="one marker per partition")
    result = pipeline.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert sum(c.committed for c in counters) == 10


def test_group_by_key_side_inputs_and_an_empty_combine(address):
    pipeline = _pipeline(address)
    words = pipeline | "Words" >> beam.Create(["b", "a", "c", "a", "b", "a"] * 5)
    counts = words | beam.Map(lambda w: (w, 1)) | beam.GroupByKey() | beam.MapTuple(lambda w, ones: (w, sum(ones)))
    assert_that(counts, equal_to([("a", 15), ("b", 10), ("c", 5)]), label="grouped")
    total = words | "Total" >> beam.combiners.Count.Globally()
    shares = counts | beam.Map(lambda wn, total: (wn[0], wn[1] / total), beam.pvalue.AsSingleton(total))
    assert_that(shares, equal_to([("a", 0.5), ("b", 1 / 3), ("c", 1 / 6)]), label="side input")
    nothing = words | beam.Filter(lambda w: False) | "Empty" >> beam.CombineGlobally(sum)
    assert_that(nothing, equal_to([0]), label="default of an empty combine")
    pipeline.run().wait_until_finish()


def test_a_failed_assertion_fails_the_pipeline(address):
    pipeline = _pipeline(address)
    assert_that(pipeline | beam.Create([1, 2]), equal_to([1, 2, 3]))
    with pytest.raises(BeamAssertException):
        pipeline.run().wait_until_finish()


def test_reshuffle_spreads_one_element_partitions_over_every_partition(address):
    from beam_jobs.dask_runner import _split_round_robin

    assert [len(bucket) for p in range(4) for bucket in _split_round_robin(["x"], p, 4) if bucket] == [1] * 4
    pipeline = _pipeline(address, npartitions=4)
    sizes = (pipeline | beam.Create(list(range(4))) | beam.Reshuffle()
             | beam.ParDo(_BundleSize()) | beam.combiners.ToList() | beam.Map(sorted))
    assert_that(sizes, equal_to([[1, 1, 1, 1]]))
    pipeline.run().wait_until_finish()


class _BundleSize(beam.DoFn):
    def start_bundle(self):
        self.size = 0

    def process(self, element):
        self.size += 1

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        yield WindowedValue(self.size, 0, [GlobalWindow()])


def test_reshuffle_spreads_one_partition_and_file_sinks_write_every_line(address, tmp_path):
    pipeline = _pipeline(address, npartitions=4)
    lines = (pipeline | beam.Create([list(range(100))]) | beam.FlatMap(lambda xs: xs) | beam.Reshuffle()
             | beam.Map(str))
    _ = lines | "Sharded" >> beam.io.WriteToText(str(tmp_path / "sharded"), num_shards=3)
    _ = lines | "Bundles" >> beam.io.WriteToText(str(tmp_path / "bundles"))
    pipeline.run().wait_until_finish()
    for prefix, shards in (("sharded", 3), ("bundles", 4)):  # runner-chosen shards: one per partition
        files = glob.glob(str(tmp_path / prefix) + "-*")
        assert len(files) == shards
        written = [line for path in files for line in open(path).read().split()]
        assert sorted(written, key=int) == [str(x) for x in range(100)]
    assert not [name for name in os.listdir(tmp_path) if name.startswith("beam-temp")]


def test_unsupported_windowing_is_refused_by_name(address):
    from apache_beam.transforms import window

    pipeline = _pipeline(address)
    _ = (pipeline | beam.Create([1]) | "Stamp" >> beam.Map(lambda x: window.TimestampedValue(x, 1))
         | "Fixed" >> beam.WindowInto(window.FixedWindows(10)))
    with pytest.raises(NotImplementedError, match="Fixed"):
        pipeline.run()


def test_dask_runner_names_mean_ours_on_the_command_line_and_in_beam():
    from apache_beam.runners.runner import create_runner

    from beam_jobs.runner_names import DASK_RUNNER, with_our_runners

    assert with_our_runners(["--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1"]) == [
        f"--runner={DASK_RUNNER}", "--dask_client_address=tcp://127.0.0.1:1"]
    assert with_our_runners(["--runner", "dask"]) == ["--runner", DASK_RUNNER]
    assert with_our_runners(["--runner=DataflowRunner"]) == ["--runner=DataflowRunner"]
    assert type(create_runner(DASK_RUNNER)) is DaskRunner


def test_a_worker_imports_the_dofns_modules_before_any_task_and_the_job_leaves_no_plugin(tmp_path):
    """Lazy imports from a task thread and a communication thread at once once deadlocked in CI
    (``_DeadlockError`` on ``tablegen_tf.readers.base``): the runner's worker plugin imports every
    DoFn's module when the job starts, before any task, and is unregistered when the job ends."""
    import sys
    import textwrap

    from dask.distributed import Client, LocalCluster

    (tmp_path / "dofn_module_for_test.py").write_text(textwrap.dedent(f"""
        import traceback
        import apache_beam as beam
        with open({str(tmp_path / "imported_by.txt")!r}, "a") as handle:
            handle.write(" ".join(frame.name for frame in traceback.extract_stack()) + "\\n")
        class Double(beam.DoFn):
            def process(self, number):
                yield 2 * number
    """))
    sys.path.insert(0, str(tmp_path))  # worker processes start with the launcher's sys.path
    try:
        import dofn_module_for_test

        (tmp_path / "imported_by.txt").unlink()  # this process's import; the worker's comes next
        with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address=None, local_directory=str(tmp_path / "dask-scratch")) as cluster:
            pipeline = _pipeline(cluster.scheduler_address)
            assert_that(pipeline | beam.Create([1, 2]) | beam.ParDo(dofn_module_for_test.Double()), equal_to([2, 4]))
            pipeline.run().wait_until_finish()
            with Client(cluster.scheduler_address) as client:
                plugins = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("dofn_module_for_test", None)
    stacks = [line.split() for line in (tmp_path / "imported_by.txt").read_text().splitlines()]
    assert len(stacks) == 1 and "setup" in stacks[0] and "_run_bundle" not in stacks[0], stacks
    assert not [name for name in plugins if name.startswith("tablegen-")]
