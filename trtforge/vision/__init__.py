"""Vision: GPU preprocessing, GPU decoding (classification top-k, DETR-style boxes), the predictor.

Example:
    >>> from trtforge.vision import Predictor
    >>> predict = Predictor(engine, engine_sidecar.preprocessing, task="detection")
"""

from trtforge.vision.decode import Classification, Detections
from trtforge.vision.predictor import Predictor
from trtforge.vision.preprocess import PreprocessConfig, Preprocessor, decode_image

__all__ = ["Classification", "Detections", "PreprocessConfig", "Predictor", "Preprocessor", "decode_image"]
