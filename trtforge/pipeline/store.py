"""Engine-cache storage for ``compile``: the request key, lookups, and stores that warn instead of failing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from trtforge.builder.portability import file_suffix
from trtforge.cache.engine_cache import CacheEntry, EngineCache
from trtforge.core.config import QUANTIZED_REQUESTS, CompileConfig
from trtforge.core.errors import spelled
from trtforge.pipeline.record import Built

log = logging.getLogger(__name__)


def request_key_of(model_or_onnx: Any, example_inputs: Any, config: CompileConfig,
                 engine_cache: EngineCache | None) -> str | None:
    """A cheap key over what was asked (a hit skips export, passes and build); none when quantized."""
    if engine_cache is None or config.precision in QUANTIZED_REQUESTS:
        return None
    from trtforge.cache.request_key import request_key

    return request_key(model_or_onnx, example_inputs, config, converter_hash=direct_converter_hash(config))


def direct_converter_hash(config: CompileConfig) -> str | None:
    """The converters' source hash on the direct path (part of both cache keys), else None."""
    if config.path != "direct":
        return None
    from trtforge.convert.converters import source_hash

    return source_hash()


def lookup_request(stack: contextlib.ExitStack, engine_cache: EngineCache | None, request: str | None) -> Built | None:
    """The cached build for ``request``, holding its lock on ``stack`` until the artifact is written."""
    if request is None or engine_cache is None:
        return None
    stack.enter_context(engine_cache.lock(f"request-{request}"))
    key = engine_cache.lookup_request(request)
    entry = engine_cache.get(key) if key else None
    return Built.from_entry(entry) if entry is not None else None


class Cacheable(Protocol):
    """What the engine cache keeps of a build: its members (name → bytes)."""

    def files(self) -> dict[str, bytes]: ...


P = TypeVar("P", bound=Cacheable)


def cached_build(engine_cache: EngineCache | None, key: str, build: Callable[[], P], *,
                 read: Callable[[CacheEntry], P], meta: Callable[[P], dict]) -> P:
    """The one cached-build step of every path (the ONNX path, the direct path, each partition part): under
    ``key``'s lock, the product ``read`` from the cache when it holds ``key``; else ``build()`` (the build and
    its typed record), stored with ``meta(product)`` (a cache that cannot store warns once, never fails).

    Example:
        >>> built = cached_build(cache, key, lambda: Built.fresh(key, plan, record), read=Built.from_entry,
        ...                      meta=built_meta(config))
    """
    if engine_cache is None:
        return build()
    with engine_cache.lock(key):
        entry = engine_cache.get(key)
        if entry is not None:
            return read(entry)
        product = build()
        store_in_cache(engine_cache, key, product.files(), meta(product))
        return product


def built_meta(config: CompileConfig) -> Callable[[Built], dict]:
    """The engine cache's listing of a whole-model build (``trtforge cache ls``)."""
    return lambda built: {"model": config.name, "precision": built.record.precision.built,
                          "targets": list(config.targets), "options": file_suffix(config).lstrip("_"),
                          "engine_size": built.engine_size}


def store_in_cache(engine_cache: EngineCache, key: str, files: dict[str, bytes], meta: dict) -> bool:
    """Store a finished build's files; a cache that cannot store (full disk, no permission) warns, never fails
    the build."""
    try:
        engine_cache.put(key, files, meta)
    except OSError as exc:
        warn_cache(engine_cache, exc)
        return False
    return True


def warn_cache(engine_cache: EngineCache, exc: OSError) -> None:
    """One warning line: the engine cache could not store this build (the engine is still delivered)."""
    if engine_cache.store_failed:  # said once per compile, not once per file
        return
    engine_cache.store_failed = True
    message = (f"the engine cache {engine_cache.directory} could not store this build ({exc.strerror or exc}); "
               f"the engine is written all the same. Free space there or pass "
               f"{spelled(cli='--no-cache', python='cache=False')}")
    log.warning(message)
