"""``Artifact.predictor`` hands each option to the one that takes it: the Predictor or the route."""

from __future__ import annotations

import pytest

from trtforge.artifact import Artifact, predictor_option_names
from trtforge.vision.predictor import Predictor


@pytest.fixture()
def art(lite0_sidecar) -> Artifact:
    return Artifact.open(lite0_sidecar)


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_compile_preprocessing_reaches_the_predictor(art, fused):
    # Regression: the hand-written key list lacked compile_preprocessing, so it went to the engine
    # loader, which refused it with a TypeError.
    predict = art.predictor(route="eager", device="cpu", compile_preprocessing=fused, top_k=3)
    assert isinstance(predict, Predictor)
    assert predict.compile_preprocessing is fused and predict.top_k == 3
    assert predict.engine.route == "eager" and predict.pre.config.size == (224, 224)


def test_every_predictor_option_is_known_and_route_options_still_reach_the_route(art):
    assert {"labels", "top_k", "num_detections", "threshold", "cuda_graph",
            "compile_preprocessing"} <= predictor_option_names(Predictor)
    with pytest.raises(TypeError, match="not_an_option"):
        art.predictor(route="eager", device="cpu", not_an_option=1)
