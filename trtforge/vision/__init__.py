"""Vision: preprocessing on the device, GPU decoding (classification top-k, DETR-style boxes), the predictor.

The preprocessing record and transform are ``trtforge.core.preprocessing``, re-exported here.

Example:
    >>> from trtforge.vision import Predictor
    >>> predict = Predictor(engine, engine_sidecar.preprocessing, task="detection")
"""

from trtforge.core.preprocessing import PreprocessConfig, decode_image
from trtforge.vision.decode import Classification, Detections
from trtforge.vision.pipeline import PipelinedPredictor
from trtforge.vision.predictor import Predictor
from trtforge.vision.preprocess import Preprocessor

__all__ = ["Classification", "Detections", "PipelinedPredictor", "PreprocessConfig", "Predictor", "Preprocessor", "decode_image"]
