"""``trtforge doctor``: what this machine offers, and whether an engine can run on it.

Two halves. ``gather_facts()`` reads the machine (Python, torch and its CUDA build without importing
torch, the driver and GPUs through ``libcuda``, each TensorRT flavour, ONNX Runtime) into a frozen
``MachineFacts``. The decisions (``gpu_support``, ``artifact_verdict``) are pure functions over those
facts, so they are tested with made-up GPU lists.

Example:
    >>> facts = gather_facts()
    >>> [s.line for s in gpu_support(facts)]
    ['GPU 0 NVIDIA H200 (sm90): TensorRT-RTX cannot run engines here ...; full TensorRT: not installed ...']
    >>> artifact_verdict(facts, read_sidecar(Path("out/m_fp16.json")).builder).line
    'cannot run here: TensorRT-RTX does not run on sm90 (NVIDIA H200); full TensorRT is the way: ...'
"""

from __future__ import annotations

import ast
import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trtforge.builder.capability import DOC_ROWS, capability_words
from trtforge.core.gpu_targets import FULL_TRT_MIN_CC, HARDWARE_LEVEL_MIN_CC, RTX_CCS, RTX_PORTABLE_TARGETS
from trtforge.core.sidecar import BuilderRecord

INSTALL = {
    "tensorrt": "pip install 'trtforge[tensorrt]'",
    "tensorrt_rtx": "pip install tensorrt-rtx-cu13 tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings",
}
LABEL = {"tensorrt": "full TensorRT", "tensorrt_rtx": "TensorRT-RTX"}


@dataclass(frozen=True)
class Gpu:
    """One CUDA device: index, name, compute capability as ``"sm90"``, memory in MiB."""

    index: int
    name: str
    cc: str
    memory_mib: int | None = None

    @property
    def cc_number(self) -> int:
        return int(self.cc[2:])


@dataclass(frozen=True)
class Flavour:
    """A TensorRT flavour: its version when it imports (``problem`` says why not), its targets."""

    name: str
    version: str | None = None
    problem: str | None = None
    targets: tuple[str, ...] = ()

    @property
    def importable(self) -> bool:
        return self.version is not None


@dataclass(frozen=True)
class MachineFacts:
    """What ``doctor`` knows of a machine; the decisions below read nothing else."""

    python: str
    platform: str
    torch: str | None = None
    torch_cuda: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    gpus: tuple[Gpu, ...] = ()
    flavours: tuple[Flavour, ...] = ()
    onnxruntime: str | None = None
    ort_providers: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def flavour(self, name: str) -> Flavour | None:
        """The flavour ``name`` when it imports, else None."""
        return next((f for f in self.flavours if f.name == name and f.importable), None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- reading the machine --------------------------------------------------------------------------
def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda_build() -> str | None:
    """The CUDA version torch was built with (None for a CPU wheel), read from ``torch/version.py``
    without importing torch (which takes seconds)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    if not source.is_file():
        return None
    for node in ast.parse(source.read_text()).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Constant):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "cuda" for t in targets):
            return node.value.value
    return None


def _cuda_gpus() -> tuple[str | None, tuple[Gpu, ...]]:
    """(CUDA driver API version, GPUs) through ``libcuda``; (None, ()) without a driver."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
    except OSError:
        return None, ()
    count, version = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None, ()
    lib.cuDriverGetVersion(ctypes.byref(version))
    gpus = []
    for index in range(count.value):
        device, major, minor, memory = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), ctypes.c_size_t(0)
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGet(ctypes.byref(device), index)
        lib.cuDeviceGetName(name, 256, device)
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # ..._MINOR
        lib.cuDeviceTotalMem_v2(ctypes.byref(memory), device)
        gpus.append(Gpu(index, name.value.decode(errors="replace"), f"sm{major.value}{minor.value}",
                        memory.value // 2**20 or None))
    v = version.value
    return (f"{v // 1000}.{v % 1000 // 10}" if v else None), tuple(gpus)


def _driver_version() -> str | None:
    """The display driver's version from ``nvidia-smi`` (None without it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _flavours() -> tuple[Flavour, ...]:
    from trtforge.core import trt

    found = []
    for name, info in trt.installed().items():
        if isinstance(info, str):
            found.append(Flavour(name, problem=info))
        else:
            found.append(Flavour(name, info.version, targets=info.compute_capability_targets))
    return tuple(found)


def _onnxruntime() -> tuple[str | None, tuple[str, ...]]:
    if importlib.util.find_spec("onnxruntime") is None:
        return None, ()
    import onnxruntime

    return onnxruntime.__version__, tuple(onnxruntime.get_available_providers())


def gather_facts() -> MachineFacts:
    """Read this machine (about a second; torch is not imported).

    Example:
        >>> gather_facts().gpus
        (Gpu(index=0, name='NVIDIA H200', cc='sm90', memory_mib=143771),)
    """
    cuda_driver, gpus = _cuda_gpus()
    ort_version, providers = _onnxruntime()
    return MachineFacts(
        python=platform.python_version(), platform=f"{platform.system()} {platform.machine()}",
        torch=_package_version("torch"), torch_cuda=torch_cuda_build(),
        driver=_driver_version() if gpus else None, cuda_driver=cuda_driver, gpus=gpus,
        flavours=_flavours(), onnxruntime=ort_version, ort_providers=providers,
        notes=(f"python executable {sys.executable}",),
    )


# -- decisions (pure) -----------------------------------------------------------------------------
def rtx_targets(facts: MachineFacts) -> tuple[str, ...]:
    """Compute capabilities TensorRT-RTX runs on: its bindings' targets, else the support matrix."""
    rtx = facts.flavour("tensorrt_rtx")
    return rtx.targets if rtx is not None and rtx.targets else RTX_CCS  # the bindings cannot say: the target table


@dataclass(frozen=True)
class GpuSupport:
    """Whether each flavour can run engines on one GPU, and the line that says so."""

    gpu: Gpu
    rtx: bool
    rtx_installed: bool
    full: bool
    full_installed: bool
    line: str


def gpu_support(facts: MachineFacts) -> list[GpuSupport]:
    """Per GPU: can TensorRT-RTX run engines there, and is full TensorRT present (and usable)?

    Example:
        >>> gpu_support(MachineFacts("3.12", "Linux", gpus=(Gpu(0, "RTX 3090", "sm86"),)))[0].rtx
        True
    """
    rows = []
    rtx_ccs = rtx_targets(facts)
    rtx_installed = facts.flavour("tensorrt_rtx") is not None
    full = facts.flavour("tensorrt")
    for gpu in facts.gpus:
        rtx_ok = gpu.cc in rtx_ccs
        full_ok = gpu.cc_number >= FULL_TRT_MIN_CC
        rtx_text = (f"TensorRT-RTX can run engines here{'' if rtx_installed else ' (not installed)'}" if rtx_ok
                    else f"TensorRT-RTX cannot run engines here (it runs on {', '.join(rtx_ccs)})")
        full_text = (f"full TensorRT {full.version}: present" if full is not None
                     else f"full TensorRT: not installed ({INSTALL['tensorrt']})")
        if not full_ok:
            full_text += f", but it needs sm{FULL_TRT_MIN_CC} or newer"
        rows.append(GpuSupport(gpu, rtx_ok, rtx_installed, full_ok, full is not None,
                               f"GPU {gpu.index} {gpu.name} ({gpu.cc}): {rtx_text}; {full_text}"))
    return rows


def capability_lines(facts: MachineFacts) -> list[str]:
    """Per local GPU and flavour: what convolutions and GEMMs run as there, and the precisions that pay
    off (``builder.capability``'s row). A flavour that is not installed is read at the table's version.

    Example:
        >>> capability_lines(MachineFacts("3.12", "Linux", gpus=(Gpu(0, "RTX 4090", "sm89"),)))[0]
        'GPU 0 (sm89), TensorRT-RTX 1.7 (not installed): convolutions FP16/BF16; INT8 weight-only, FP8; ...'
    """
    lines = []
    for gpu in facts.gpus:
        for flavour, doc_version, _ in DOC_ROWS:
            installed = facts.flavour(flavour)
            version = installed.version if installed is not None else doc_version
            state = "" if installed is not None else " (not installed)"
            lines.append(f"GPU {gpu.index} ({gpu.cc}), {LABEL[flavour]} {version}{state}: "
                         + capability_words(flavour, version, gpu.cc))
    return lines


@dataclass(frozen=True)
class Verdict:
    """Can the engine run here? ``line`` says so in one line, with what to rebuild or install if not."""

    runs: bool
    line: str
    gpu: int | None = None


def _same_release(built: str | None, installed: str) -> bool:
    """TensorRT plans load only in the release that built them: compare major.minor.patch."""
    return built is None or built.split(".")[:3] == installed.split(".")[:3]


def _rtx_problem(facts: MachineFacts, gpu: Gpu, builder: BuilderRecord) -> str | None:
    rtx = facts.flavour("tensorrt_rtx")
    if gpu.cc not in rtx_targets(facts):
        full = facts.flavour("tensorrt")
        how = ("rebuild it here with trtforge build (full TensorRT is installed and is used first)" if full
               else f"install it ({INSTALL['tensorrt']}) and rebuild with trtforge build")
        return f"TensorRT-RTX does not run on {gpu.cc} ({gpu.name}); full TensorRT is the way: {how}"
    if rtx is None:
        return f"the engine needs TensorRT-RTX {builder.version or ''}, which is not installed: {INSTALL['tensorrt_rtx']}"
    targets = [t for t in builder.targets if t != "portable"]
    if targets and gpu.cc not in targets:
        return f"built for {', '.join(targets)}, not {gpu.cc} ({gpu.name}): rebuild with trtforge build --target {gpu.cc}"
    if not targets and gpu.cc not in RTX_PORTABLE_TARGETS:
        return (f"a portable TensorRT-RTX engine runs on {', '.join(RTX_PORTABLE_TARGETS)}, not {gpu.cc} "
                f"({gpu.name}): rebuild with trtforge build --target {gpu.cc}")
    if not builder.version_compatible and not _same_release(builder.version, rtx.version):
        return (f"built with TensorRT-RTX {builder.version}, installed {rtx.version}: rebuild with trtforge build "
                f"here, or pip install the matching tensorrt-rtx-cu13=={builder.version}")
    return None


def _full_problem(facts: MachineFacts, gpu: Gpu, builder: BuilderRecord) -> str | None:
    full = facts.flavour("tensorrt")
    if full is None:
        return f"the engine needs full TensorRT {builder.version or ''}, which is not installed: {INSTALL['tensorrt']}"
    if gpu.cc_number < FULL_TRT_MIN_CC:
        return f"full TensorRT does not run on {gpu.cc} ({gpu.name}); it needs sm{FULL_TRT_MIN_CC} or newer"
    level_min = HARDWARE_LEVEL_MIN_CC.get(builder.hardware_compatibility or "")
    if level_min is not None and gpu.cc_number < level_min:
        return (f"built with hardware_compatibility={builder.hardware_compatibility}, which needs sm{level_min}+, "
                f"not {gpu.cc}: rebuild without it on this GPU")
    if not builder.version_compatible and not _same_release(builder.version, full.version):
        return (f"built with TensorRT {builder.version}, installed {full.version}: rebuild here with trtforge build, "
                f"or build with --version-compatible")
    return None


def artifact_verdict(facts: MachineFacts, builder: BuilderRecord) -> Verdict:
    """One line: can an engine built as ``builder`` says run on this machine; if not, what to do.

    Example:
        >>> h200 = MachineFacts("3.12", "Linux", gpus=(Gpu(0, "NVIDIA H200", "sm90"),),
        ...                     flavours=(Flavour("tensorrt_rtx", "1.7.1.116"),))
        >>> artifact_verdict(h200, BuilderRecord(flavour="tensorrt_rtx", version="1.7.1.116")).runs
        False
    """
    flavour = builder.flavour
    if flavour not in LABEL:
        return Verdict(False, f"cannot run here: the sidecar names TensorRT flavour {flavour!r}, which trtforge "
                              "does not know; rebuild the engine with trtforge build")
    if not facts.gpus:
        return Verdict(False, "cannot run here: no CUDA GPU found (TensorRT engines run on NVIDIA GPUs only); "
                              "run it on a GPU machine, or check the reference here: trtforge check ARTIFACT "
                              "--route onnxruntime")
    problems = []
    for gpu in facts.gpus:
        problem = (_rtx_problem if flavour == "tensorrt_rtx" else _full_problem)(facts, gpu, builder)
        if problem is None:
            caveat = ("" if flavour == "tensorrt_rtx" or builder.hardware_compatibility
                      else " if this is the GPU model it was built on")
            return Verdict(True, f"can run here: GPU {gpu.index} {gpu.name} ({gpu.cc}) with "
                                 f"{LABEL[flavour]} {facts.flavour(flavour).version}{caveat}", gpu.index)
        problems.append(problem)
    return Verdict(False, f"cannot run here: {problems[0]}")
