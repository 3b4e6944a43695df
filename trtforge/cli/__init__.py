"""The ``trtforge`` command: one small module per command, each importing its heavy parts when it runs.

Example:
    $ trtforge build model.onnx --precision fp16 --batch 1:8:32 --target sm89 -o out/
    $ trtforge inspect out/model_fp16.json
    $ trtforge coverage mypkg.models:make_net --input-shape 2x3x224x224
    $ trtforge demo
"""

from trtforge.cli import (  # noqa: F401 - each registers its command
    bench,
    build,
    cache,
    check,
    compare,
    coverage,
    debug,
    demo,
    doctor,
    inspect,
    quantize,
    refit,
    selftest,
    tune,
)
from trtforge.cli.app import app, main
from trtforge.cli.serve import register as _register_serve

_register_serve(app)

__all__ = ["app", "main"]
