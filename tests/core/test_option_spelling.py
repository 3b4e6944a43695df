"""A bad option value is named the way its reader writes it: the flag in the CLI, the argument in
Python (``config.option_spelling``); checked on QuantConfig, whose messages named Python arguments on the CLI before."""

from __future__ import annotations

import pytest

from trtforge.core.config import ConfigError, QuantConfig
from trtforge.core.errors import cli_audience


@pytest.mark.parametrize(("fields", "python", "cli"), [
    ({"holdout": 1.5}, "holdout=1.5 must lie in (0, 1)", "--holdout 1.5 must lie in (0, 1)"),
    ({"batch_size": 0}, "batch_size=0: the calibration", "--calib-batch-size 0: the calibration"),
    ({"smoothquant": 3.0}, "smoothquant=3.0: the SmoothQuant alpha", "--smoothquant 3.0: the SmoothQuant alpha"),
    ({"block_size": 7}, "block_size=7: give a power of two", "--block-size 7: give a power of two"),
    ({"calibrator": "magic"}, "calibrator='magic'; choose one of", "--calibrator magic; choose one of"),
])
def test_bad_quant_options_are_named_for_their_reader(fields, python, cli):
    with pytest.raises(ConfigError) as caught:
        QuantConfig(**fields)
    assert str(caught.value).startswith(python)
    with cli_audience(), pytest.raises(ConfigError) as caught:
        QuantConfig(**fields)
    assert str(caught.value).startswith(cli)
