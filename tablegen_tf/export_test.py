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
