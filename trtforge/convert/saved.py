"""A partitioned module as a folder: engines + sidecars + recorded networks + the exported program.

Layout::

    manifest.json          what was saved: format, converter hash, min_block_size, precision, and per
                           engine partition its argument names, profile, record and sidecar files
    program.pt2            the decomposed ``torch.export`` program (``torch.export.save``); the PyTorch
                           parts run from it
    <fused_N>.record.pt    the recorded network of an engine partition (plain data, read weights_only)
    <fused_N>.engine       its TensorRT plan, with <fused_N>.json, its sidecar (when it was built)

Loading splits the program again with the same rules and puts the saved engines where their
partitions are, so no converter runs and nothing is rebuilt; a split that no longer matches the saved
engines (other converters) is refused with the fix.

Example:
    >>> module, report = partition(model, (x,), batch=(1, 2, 4))
    >>> save_partitioned("out/model_direct", module, report)
    >>> module, report = load_partitioned("out/model_direct")        # engines run by the evaluator
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trtforge.convert.converters import source_hash
from trtforge.convert.network import TORCH_TO_TRT, Layer, Record
from trtforge.convert.partition import EngineModule, PartitionReport, Runner, reference_runner, split
from trtforge.core import trt
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import FileConflict, InvalidArgument, MissingFile
from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, read_sidecar, write_sidecar
from trtforge.core.specs import TensorSpec

GENERATOR = "trtforge-partitioned"
FORMAT = 1
MANIFEST, PROGRAM = "manifest.json", "program.pt2"


def _record_data(record: Record) -> dict:
    return {"inputs": list(record.inputs), "outputs": list(record.outputs),
            "layers": [(la.kind, la.inputs, la.outputs, la.attrs) for la in record.layers]}


def _record_from(data: dict) -> Record:
    return Record(inputs=[tuple(i) for i in data["inputs"]], outputs=list(data["outputs"]),
                  layers=[Layer(kind, tuple(ins), tuple(outs), attrs) for kind, ins, outs, attrs in data["layers"]])


def read_record(path: Path) -> Record:
    """The recorded network of an engine part, as ``save_partitioned`` wrote it (``<fused_N>.record.pt``)."""
    return _record_from(torch.load(path, weights_only=True))


def _spec(name: str, dtype: torch.dtype, shape) -> TensorSpec:
    return TensorSpec(name, trt.DTYPE_NAMES[TORCH_TO_TRT[dtype]], tuple(shape))


def _sidecar(name: str, engine: EngineModule, report: PartitionReport, engine_path: Path) -> Sidecar:
    info = trt.info()
    return Sidecar(
        name=name, engine_file=engine_path.name, engine_size=engine_path.stat().st_size,
        engine_sha256=sha256_file(engine_path),
        inputs=tuple(_spec(*i) for i in engine.record.inputs), outputs=tuple(_spec(*o) for o in engine.outputs),
        profiles=(engine.profile,) if engine.profile else (),
        precision={"requested": report.precision, "built": report.precision},
        builder={"flavour": info.flavour, "version": info.version, "strongly_typed": True,
                 "optimization_level": report.optimization_level, "converter_hash": source_hash()},
        source={"kind": "torch", "path": "direct"},
        notes=("an engine partition of a partitioned module (trtforge.convert.saved)",))


def save_partitioned(folder: str | Path, module: torch.fx.GraphModule, report: PartitionReport) -> Path:
    """Write ``partition()``'s module and report into ``folder`` (created; a folder trtforge did not
    write is refused). Returns the manifest's path."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not (folder / MANIFEST).is_file():
        raise FileConflict(f"{folder} holds files and no {MANIFEST}; refusing to write into a folder trtforge "
                           "did not write. Choose an empty or new folder")
    if report.program is None:
        raise InvalidArgument("this PartitionReport carries no exported program; save what partition() returned")
    folder.mkdir(parents=True, exist_ok=True)
    torch.export.save(report.program, folder / PROGRAM)
    engines = {}
    for name in report.engines:
        engine: EngineModule = getattr(module, name)
        torch.save(_record_data(engine.record), folder / f"{name}.record.pt")
        entry = {"arg_names": list(engine.arg_names), "profile": engine.profile, "record": f"{name}.record.pt",
                 "outputs": [[n, str(d).removeprefix("torch."), list(s)] for n, d, s in engine.outputs]}
        if engine.plan is not None:
            engine_path = folder / f"{name}.engine"
            atomic_write_bytes(engine_path, engine.plan)
            entry["sidecar"] = write_sidecar(folder / f"{name}.json", _sidecar(name, engine, report, engine_path)).name
        engines[name] = entry
    manifest = {"generator": GENERATOR, "format": FORMAT, "converter_hash": source_hash(),
                "min_block_size": report.min_block_size, "precision": report.precision,
                "torch_executed_ops": list(report.torch_executed_ops), "engines": engines, "pytorch": report.pytorch}
    path = folder / MANIFEST
    atomic_write_bytes(path, (json.dumps(manifest, indent=2) + "\n").encode())
    return path


def _manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise MissingFile(f"no {MANIFEST} in {folder}; pass a folder written by save_partitioned")
    data = json.loads(path.read_text())
    if data.get("generator") != GENERATOR or data.get("format") != FORMAT:
        raise InvalidArgument(f"{path} is not a trtforge partitioned-module manifest (format {FORMAT}); "
                              "save the module again with save_partitioned")
    return data


def load_partitioned(folder: str | Path, runner: Runner = reference_runner
                     ) -> tuple[torch.fx.GraphModule, PartitionReport]:
    """The module ``save_partitioned`` wrote: the program split again, the saved engines (sha256
    checked against their sidecars) in their partitions, each run by ``runner``."""
    folder = Path(folder)
    manifest = _manifest(folder)
    saved = manifest["engines"]
    program = torch.export.load(folder / PROGRAM)
    report = PartitionReport(program=program, min_block_size=manifest["min_block_size"],
                             precision=manifest["precision"],
                             torch_executed_ops=tuple(manifest.get("torch_executed_ops", ())))

    def make(parent: torch.fx.GraphModule, node: torch.fx.Node) -> EngineModule:
        entry = saved.get(node.target)
        arg_names = [n.name for n in getattr(parent, node.target).graph.find_nodes(op="placeholder")]
        if entry is None or entry["arg_names"] != arg_names:
            raise InvalidArgument(f"{folder}: partition {node.target} does not match the saved engines (saved "
                                  "with other converters?); partition the model again and save it")
        plan = read_sidecar(folder / entry["sidecar"]).verify_engine().read_bytes() if "sidecar" in entry else None
        record = read_record(folder / entry["record"])
        outputs = [(n, getattr(torch, d), tuple(s)) for n, d, s in entry["outputs"]]
        engine = EngineModule(plan, record, arg_names, runner, entry["profile"], outputs)
        engine.sidecar_path = folder / entry["sidecar"] if "sidecar" in entry else None
        return engine

    module = split(program, report, make)
    if set(report.engines) != set(saved):
        raise InvalidArgument(f"{folder}: the saved engines {sorted(saved)} do not match the partitions "
                              f"{sorted(report.engines)}; partition the model again and save it")
    return module, report
