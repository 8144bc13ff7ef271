import pytest

from tablegen_tf.config import DecodeConfig
from tablegen_tf.export import SUPPORTED_BEAMS, warmup_requests


@pytest.mark.parametrize("run_beam, warmed", [(3, 3), (15, max(SUPPORTED_BEAMS))])
def test_generate_warmup_stays_within_the_signatures_beam_widths(run_beam, warmed):
    """TF Serving fails a model whose warm-up request fails: a run decoding with beam 15
    (webnlg.yaml) warms `generate` up at its widest width, not at 15."""
    requests = dict(warmup_requests("tables", ['{"table": []}'], {"serving_default", "generate"},
                                    DecodeConfig(beam_size=run_beam)))
    assert int(requests["generate"]["beam_size"]) == warmed


@pytest.mark.parametrize("parallel_searches, batches", [(2, [1, 1, 3, 16]), (1, [1, 1, 3])])
def test_serving_default_warms_up_every_search_its_batch_sizes_take(parallel_searches, batches):
    """One table (XLA), a few (one graph loop) and, with parallel searches, a batch of
    PARALLEL_MIN_BATCH rows: the parallel searches' first call is not left to a client."""
    from tablegen_tf.generation import PARALLEL_MIN_BATCH

    tables = ['{"table": []}', '{"table": [{"field": "a", "value": "b"}]}', '{"table": [{"field": "a", "value": "bc"}]}']
    requests = warmup_requests("tables", tables, {"serving_default"}, DecodeConfig(parallel_searches=parallel_searches))
    assert [len(arrays["tables"]) for _, arrays in requests] == batches
    if parallel_searches > 1:
        assert batches[-1] == PARALLEL_MIN_BATCH and set(requests[-1][1]["tables"]) == set(tables)


def test_a_generate_request_longer_than_the_models_longest_search_is_refused():
    import tensorflow as tf

    from tablegen_tf.export import checked_decoding_inputs

    beam, length = checked_decoding_inputs(tf.constant(5), tf.constant(80), longest_search=80)
    assert (int(beam), int(length)) == (5, 80)
    assert int(checked_decoding_inputs(tf.constant(5), tf.constant(500))[1]) == 500  # no limit
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length must be <= 80 for this model"):
        checked_decoding_inputs(tf.constant(5), tf.constant(81), longest_search=80)
