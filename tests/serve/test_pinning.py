"""Which host inputs go to the GPU by one DMA: the mapping lookup on this process's real
/proc/self/maps, against a real POSIX shared-memory segment. Registering with CUDA itself is
GPU-only (tests/serve/test_gpu_inputs.py counts the rows that went by DMA on a real tritonserver)."""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import pytest

from trtforge.runtime.staging import cuda_register
from trtforge.serve.pinning import HostRegistry, _read_maps, find_mapping, parse_maps


@pytest.fixture
def segment():
    shm = shared_memory.SharedMemory(create=True, size=3 * 4096 + 100)
    try:
        yield shm
    finally:
        shm.close()
        shm.unlink()


class Recorder:
    def __init__(self, answer: bool = True) -> None:
        self.answer, self.calls, self.reads = answer, [], 0

    def register(self, start: int, size: int) -> bool:
        self.calls.append((start, size))
        return self.answer

    def read_maps(self) -> str:
        self.reads += 1
        return _read_maps()


def test_a_shared_memory_array_is_found_in_its_mapping_and_registered_once(segment):
    array = np.ndarray((10, 100), np.float32, buffer=segment.buf)[2:4]  # a view inside the segment
    address = array.__array_interface__["data"][0]
    mapping = find_mapping(address, parse_maps(_read_maps()))
    assert mapping is not None and mapping.shared and mapping.path == f"/dev/shm/{segment.name}"
    assert mapping.start <= address and address + array.nbytes <= mapping.end
    assert mapping.end - mapping.start == 4 * 4096  # the whole segment, in pages

    recorder = Recorder()
    registry = HostRegistry(register=recorder.register, read_maps=recorder.read_maps)
    assert registry.pinned(array)
    assert recorder.calls == [(mapping.start, mapping.end - mapping.start)]
    other = np.ndarray((5,), np.uint8, buffer=segment.buf, offset=9000)
    assert registry.pinned(other) and registry.covers(other) and registry.pinned(array)
    assert len(recorder.calls) == 1 and recorder.reads == 1  # one lookup, one registration
    assert registry.registered_bytes == 4 * 4096


def test_heap_arrays_and_refused_mappings_stay_pageable_and_are_not_looked_up_again(segment):
    recorder = Recorder()
    registry = HostRegistry(register=recorder.register, read_maps=recorder.read_maps)
    heap = np.zeros((256, 1024), np.float32)  # 1 MiB: its own anonymous mapping, private
    assert not registry.pinned(heap) and not registry.pinned(heap)
    assert recorder.calls == [] and recorder.reads == 1 and not registry.covers(heap)

    refusing = Recorder(answer=False)
    registry = HostRegistry(register=refusing.register, read_maps=refusing.read_maps)
    array = np.ndarray((100,), np.float32, buffer=segment.buf)
    assert not registry.pinned(array) and not registry.pinned(array)
    assert len(refusing.calls) == 1 and refusing.reads == 1 and registry.registered_bytes == 0


def test_parse_maps_reads_anonymous_private_and_shared_lines():
    text = ("00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/python3\n"
            "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
            "7f0000100000-7f0000300000 rw-s 00000000 00:1a 42   /dev/shm/triton_python_backend_shm_region_1\n")
    mappings = parse_maps(text)
    assert [(m.shared, m.path) for m in mappings] == [
        (False, "/usr/bin/python3"), (False, ""), (True, "/dev/shm/triton_python_backend_shm_region_1")]
    assert find_mapping(0x7F0000100000, mappings) is mappings[2]
    assert find_mapping(0x7F00000FFFFF, mappings) is mappings[1]
    assert find_mapping(0x7F0000300000, mappings) is None and find_mapping(0x10, mappings) is None


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only fallback")
def test_without_a_cuda_runtime_registering_says_no_and_the_copy_stays_pageable(segment):
    array = np.ndarray((100,), np.float32, buffer=segment.buf)
    assert cuda_register(array.__array_interface__["data"][0], array.nbytes) is False
    registry = HostRegistry()  # the real cudaHostRegister, on a torch without CUDA
    assert not registry.pinned(array) and registry.registered_bytes == 0
