"""``PinnedInPlace``: which caller arrays get pinned where they are, and when they are unpinned.

The CUDA calls are a recording double (no GPU here); the rules are what the predictor relies on:
a one-off array is never pinned, an array seen again is pinned once (its owner whole), an owner is
unpinned before NumPy frees its bytes, and the pins stay within their bounds.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from trtforge.runtime import staging
from trtforge.runtime.staging import PinnedInPlace


class Driver:
    """Records cudaHostRegister/Unregister as the driver sees them; refuses addresses in ``refuse``."""

    def __init__(self, refuse: set[int] | None = None) -> None:
        self.registered: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.refuse = refuse or set()

    def register(self, address: int, nbytes: int) -> bool:
        self.calls.append(("register", address))
        if address in self.refuse:
            return False
        assert address not in self.registered, "registered twice"
        self.registered[address] = nbytes
        return True

    def unregister(self, address: int) -> None:
        self.calls.append(("unregister", address))
        assert address in self.registered, "unregistered memory that was not registered"
        del self.registered[address]


def frame(h: int = 256, w: int = 256) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_second_sighting_pins_the_callers_own_bytes():
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister)
    f = frame()
    assert pins.pin(f) is None and driver.calls == []  # one sighting: copy as before
    pinned = pins.pin(f)
    t, serial = pinned.tensor, pinned.serial
    assert t.data_ptr() == address(f) == pinned.address  # no copy: the caller's pages
    assert torch.equal(t, torch.from_numpy(f))
    assert driver.registered == {address(f): f.nbytes}
    assert pins.pin(f).serial == serial and len(driver.calls) == 1  # pinned once


def test_a_new_registration_at_the_same_address_gets_a_new_serial():
    """A graph keyed by (address, serial) is never replayed over a registration it did not capture."""
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister)
    f = frame()
    pins.pin(f)
    first = pins.pin(f).serial
    pins._gone(id(f))  # as if f were collected and a new owner took its id and address
    assert driver.registered == {}
    pins.pin(f)
    assert pins.pin(f).serial != first and address(f) in driver.registered


def test_one_off_arrays_are_never_pinned():
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister)
    f = frame()
    for _ in range(20):
        assert pins.pin(f.copy()) is None  # a new array per frame: each dies before the next call
    assert driver.calls == []


def test_views_share_their_owners_pin_and_small_or_foreign_arrays_are_copied():
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister)
    frames = np.zeros((4, 256, 256, 3), np.uint8)
    assert pins.pin(frames[0]) is None
    views = [pins.pin(frames[i]) for i in range(4)]
    assert all(v is not None for v in views)
    assert driver.registered == {address(frames): frames.nbytes}  # the owner, whole, once
    assert views[2].tensor.data_ptr() == address(frames[2])
    small = np.zeros((8, 8, 3), np.uint8)
    readonly = frame()
    readonly.flags.writeable = False
    foreign = np.frombuffer(bytearray(1 << 20), np.uint8)  # NumPy does not own these bytes
    for a in (small, readonly, foreign, torch.zeros(1 << 20, dtype=torch.uint8)):
        assert pins.pin(a) is None and pins.pin(a) is None
    assert len(driver.registered) == 1


def test_an_owner_is_unpinned_before_numpy_frees_it():
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister)
    f = frame()
    where = address(f)
    pins.pin(f), pins.pin(f)
    assert where in driver.registered
    view = f[10:20]
    del f
    gc.collect()
    assert where in driver.registered  # a view keeps the owner alive
    del view
    gc.collect()
    assert driver.registered == {} and driver.calls[-1] == ("unregister", where)
    assert pins.pinned_bytes() == 0


def test_a_failing_unpin_as_an_array_is_freed_is_logged_not_raised(caplog):
    """At interpreter exit CUDA may be gone before the caller's arrays: the callback must not raise."""
    def unregister(address: int) -> None:
        raise RuntimeError("CUDA driver shutting down")

    pins = PinnedInPlace(lambda address, nbytes: True, unregister)
    f = frame()
    pins.pin(f), pins.pin(f)
    with caplog.at_level("DEBUG", logger="trtforge.runtime.staging"):
        del f
        gc.collect()
    assert "CUDA driver shutting down" in caplog.text and pins.pinned_bytes() == 0


def test_pins_stay_within_their_bounds_least_recent_first():
    driver = Driver()
    pins = PinnedInPlace(driver.register, driver.unregister, max_arrays=3)
    frames = [frame() for _ in range(5)]
    for f in frames:
        pins.pin(f), pins.pin(f)
    assert set(driver.registered) == {address(f) for f in frames[2:]}
    calls = len(driver.calls)
    for _ in range(3):  # evicted: copied from now on, never pinned and unpinned in turn
        assert pins.pin(frames[0]) is None and pins.pin(frames[-1]) is not None
    assert len(driver.calls) == calls and len(driver.registered) == 3
    other = Driver()
    by_bytes = PinnedInPlace(other.register, other.unregister, max_bytes=2 * frames[0].nbytes)
    for f in frames:
        by_bytes.pin(f), by_bytes.pin(f)
    assert by_bytes.pinned_bytes() == 2 * frames[0].nbytes
    assert staging.PIN_IN_PLACE_ARRAYS >= 4 and staging.PIN_IN_PLACE_MIN_BYTES <= 224 * 224 * 3


def test_a_refused_registration_copies_and_is_not_retried():
    f = frame()
    driver = Driver(refuse={address(f)})
    pins = PinnedInPlace(driver.register, driver.unregister)
    assert [pins.pin(f) for _ in range(5)] == [None] * 5
    assert driver.calls == [("register", address(f))]


@pytest.mark.parametrize("shape", [(1, 256, 256, 3)])
def test_preprocessor_on_the_cpu_never_pins(shape):
    from trtforge.core.preprocessing import PreprocessConfig
    from trtforge.vision.preprocess import Preprocessor

    pre = Preprocessor(PreprocessConfig(size=(224, 224)), torch.device("cpu"))
    frames = np.zeros(shape, np.uint8)
    assert pre.pinned_in_place(list(frames)) is None and pre.pinned_in_place(list(frames)) is None
    assert torch.equal(pre.upload(list(frames)), torch.from_numpy(frames))


@pytest.mark.slow  # 4 s in the fast lane (2026-12-02, loaded dev machine)
def test_copy_frames_bands_only_large_frames_of_a_batch():
    """Small frames are one np.copyto (the pool's hand-off costs more than their copy); large frames
    of a batch are split over the pool. Run in a fresh interpreter: the pool is process-wide."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from trtforge.runtime import staging\n"
        "small = np.random.default_rng(0).integers(0, 255, (32, 224, 224, 3), dtype=np.uint8)\n"
        "dst = np.zeros_like(small)\n"
        "staging.copy_frames(dst, small); assert (dst == small).all()\n"
        "dst[:] = 0; staging.copy_frames(dst, list(small)); assert (dst == small).all()\n"
        "assert not staging._POOL, 'small frames used the pool'\n"
        "big = np.random.default_rng(1).integers(0, 255, (2, 720, 1280, 3), dtype=np.uint8)\n"
        "out = np.zeros_like(big); staging.copy_frames(out, big); assert (out == big).all()\n"
        "assert staging._POOL, 'large frames of a batch were not split'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
