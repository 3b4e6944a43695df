"""The engine cache: a rebuild costs nothing when nothing that changes the engine changed.

Layout under the cache folder (default ``~/.cache/trtforge/engines``, or ``$TRTFORGE_CACHE_DIR``)::

    blobs/<sha256>        one file's bytes as they are, named by their sha256: each distinct file (an
                          engine, a processed or reference ONNX, a build record) is stored once, however
                          many entries share it. A hit hard-links the blobs into the output folder (a
                          copy across file systems): it writes no engine or graph bytes
    entries/<key>.json    the entry's record: model, precision, its members (name → size, sha256); its
                          modification time is the entry's last use (LRU eviction)
    requests/<rkey>.json  a cheap request key → the engine key (lets a hit skip export and passes)
    locks/<key>.lock      one builder per key across processes

Two keys. The **engine key** is a sha256 over the processed ONNX bytes, the build config, the
TensorRT flavour and version, and trtforge's version: everything that changes the engine's bytes.
The **request key** is a sha256 over what ``compile`` was asked (the module's class sources,
structure and state_dict bytes, the example input shapes, the ONNX file's bytes, every option
that matters, and the library versions); it maps to the engine key, so a hit reads one small JSON,
checks the entry's blobs and never exports or runs passes.

Entries are written atomically (the blobs first, then the entry's ``.json``); a reader checks each
member's size and sha256, and a corrupt or truncated entry is deleted with a warning and rebuilt.
Blobs are never changed in place (a file linked out of the cache is replaced, never edited, by
trtforge; an edit made by hand is caught by these checks and by the sidecar's). When the
blobs grow past ``max_bytes`` the least recently used entries go, and blobs no entry names with them.

Example:
    >>> cache = EngineCache()                       # ~/.cache/trtforge/engines
    >>> key = engine_key(processed_bytes, config, network_name="m_fp16")
    >>> with cache.lock(key):
    ...     entry = cache.get(key) or cache.put(key, files, meta)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from trtforge._version import __version__
from trtforge.core import trt
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.config import CompileConfig, option_spelling
from trtforge.core.errors import InvalidArgument, NotAFolder, NotPermitted, TrtforgeError, spelled
from trtforge.core.hashing import sha256_file

log = logging.getLogger(__name__)

ENV_CACHE_DIR = "TRTFORGE_CACHE_DIR"
ENV_CACHE_MAX_BYTES = "TRTFORGE_CACHE_MAX_BYTES"
DEFAULT_CACHE_DIR = Path("~/.cache/trtforge/engines")
DEFAULT_MAX_BYTES = 20 * (1 << 30)
#: Bumped when the entry layout changes; part of every key. 2: content-addressed blobs; 3: blobs stored
#: as they are (not zstd: it saved 8 % on Lite0's engine and graphs), so a hit links instead of writing.
#: 4: record.json is the typed BuildRecord (the graph hashes moved into its source).
ENTRY_FORMAT = 4
GENERATOR = "trtforge-engine-cache"
#: How long a process waits for another one building the same key.
LOCK_TIMEOUT_S = 3600.0


class CacheEntryCorrupt(TrtforgeError, ValueError):
    """A cache entry whose bytes do not match the hashes recorded for it."""


def default_cache_dir() -> Path:
    """``$TRTFORGE_CACHE_DIR`` when set, else ``~/.cache/trtforge/engines``."""
    return Path(os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR).expanduser()


def default_max_bytes() -> int:
    value = os.environ.get(ENV_CACHE_MAX_BYTES)
    if not value:
        return DEFAULT_MAX_BYTES
    try:
        return int(value)
    except ValueError as exc:
        raise InvalidArgument(f"{ENV_CACHE_MAX_BYTES}={value!r} must be a byte count, e.g. 10737418240") from exc


def digest_of(fields: Mapping[str, Any]) -> str:
    """sha256 of ``fields`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def toolchain() -> dict[str, Any]:
    """The TensorRT flavour and version and trtforge's version: part of every key."""
    info = trt.info()
    return {"flavour": info.flavour, "tensorrt": info.version, "trtforge": __version__, "format": ENTRY_FORMAT}


def engine_key(processed_onnx: bytes, config: CompileConfig, *, network_name: str,
               converter_hash: str | None = None, shape_values: Mapping[str, list[int]] | None = None) -> str:
    """The key over everything that changes the engine's bytes (the config's ``ENGINE`` options).

    ``network_name`` is written into the plan, so it belongs to the key; the output folder does not.
    On the direct path ``processed_onnx`` is the recorded network's canonical bytes and
    ``converter_hash`` the converters' source hash (``trtforge.convert.source_hash()``), so a converter
    change never serves a stale engine. ``shape_values`` are the values given for inputs that may be
    shape tensors (TensorRT builds them in), so other values never serve this engine.
    """
    fields: dict[str, Any] = {
        "kind": "engine",
        "onnx_sha256": hashlib.sha256(processed_onnx).hexdigest(),
        "config": config.key_fields(),
        "network_name": network_name,
        **toolchain(),
    }
    if converter_hash is not None:
        fields["converter_hash"] = converter_hash
    if shape_values:
        fields["shape_values"] = {name: [int(v) for v in values] for name, values in sorted(shape_values.items())}
    return digest_of(fields)


@dataclass(frozen=True)
class CacheEntry:
    """One entry read back and verified: its members' blobs (name → path) and its record.

    Example:
        >>> entry = cache.get(key)
        >>> entry.paths["engine"], entry.sha256("engine")[:12]
        (PosixPath('~/.cache/trtforge/engines/blobs/3f1c…'), '3f1c0a9b2d4e')
    """

    key: str
    paths: dict[str, Path]
    meta: dict[str, Any]

    def read(self, name: str) -> bytes:
        """One member's bytes."""
        return self.paths[name].read_bytes()

    def sha256(self, name: str) -> str:
        """One member's recorded (and checked) sha256."""
        return self.meta["files"][name]["sha256"]


@dataclass(frozen=True)
class EntryInfo:
    """What ``trtforge cache ls`` shows for one entry."""

    key: str
    model: str
    precision: str
    targets: str
    size: int
    last_use: float
    created: str


class EngineCache:
    """A folder of content-addressed engine entries with LRU eviction (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()
        self.max_bytes = default_max_bytes() if max_bytes is None else int(max_bytes)
        #: Set when a store failed (a full disk): the compile warns once.
        self.store_failed = False
        if self.max_bytes <= 0:
            raise InvalidArgument(f"cache max_bytes={self.max_bytes} must be positive")
        if self.directory.exists() and not self.directory.is_dir():
            raise NotAFolder(f"cache_dir {self.directory} is a file; pass a folder ({option_spelling('cache_dir', 'DIR')})")
        try:
            for sub in ("entries", "blobs", "requests", "locks"):
                (self.directory / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NotPermitted(
                f"engine cache folder {self.directory} cannot be created ({exc.strerror or exc}); pass "
                f"{option_spelling('cache_dir', 'DIR')} (or set ${ENV_CACHE_DIR}) to a writable folder, or "
                f"{spelled(cli='--no-cache', python='cache=False')}"
            ) from exc

    # -- paths -----------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        """Where the bytes whose sha256 is ``sha256`` are stored."""
        return self.directory / "blobs" / sha256

    def meta_path(self, key: str) -> Path:
        return self.directory / "entries" / f"{key}.json"

    def request_path(self, request_key: str) -> Path:
        return self.directory / "requests" / f"{request_key}.json"

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the per-key lock; a second process building the same key waits here, then hits."""
        lock = FileLock(str(self.directory / "locks" / f"{key}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("another process is building %s…; waiting for it", key[:12])
            lock.acquire(timeout=LOCK_TIMEOUT_S)
        try:
            yield
        finally:
            lock.release()

    # -- request keys ------------------------------------------------------------------------
    def lookup_request(self, request_key: str) -> str | None:
        """The engine key a request key was mapped to, or None."""
        try:
            data = json.loads(self.request_path(request_key).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            log.warning("cache request record %s is unreadable; deleting it", request_key[:12])
            self.request_path(request_key).unlink(missing_ok=True)
            return None
        return data.get("engine_key") if isinstance(data, dict) else None

    def remember_request(self, request_key: str, key: str) -> None:
        atomic_write_bytes(self.request_path(request_key), json.dumps({"engine_key": key}).encode())

    # -- entries ---------------------------------------------------------------------------
    def _discard(self, key: str, why: str) -> None:
        log.warning("engine cache entry %s… is %s; deleting it and rebuilding", key[:12], why)
        self.meta_path(key).unlink(missing_ok=True)

    def _check_member(self, name: str, info: Mapping[str, Any]) -> Path:
        """One member's blob, checked against its recorded size and sha256."""
        blob = self.blob_path(info["sha256"])
        try:
            size = blob.stat().st_size
        except FileNotFoundError as exc:
            raise CacheEntryCorrupt(f"missing its member {name}") from exc
        if size != info.get("size"):
            raise CacheEntryCorrupt(f"corrupt or truncated (member {name}: {size} bytes, {info.get('size')} recorded)")
        if sha256_file(blob) != info["sha256"]:
            raise CacheEntryCorrupt(f"corrupt (member {name} does not match its sha256)")
        return blob

    def get(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key`` (and its last use updated), or None on a miss."""
        meta_path = self.meta_path(key)
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._discard(key, "unreadable (its .json is not valid JSON)")
            return None
        members = meta.get("files") if isinstance(meta, dict) else None
        try:
            if not isinstance(members, dict) or not members:
                raise CacheEntryCorrupt("a record without members")
            paths = {name: self._check_member(name, info) for name, info in members.items()}
        except (CacheEntryCorrupt, KeyError, TypeError) as exc:
            for info in members.values() if isinstance(members, dict) else ():
                if isinstance(info, dict) and isinstance(info.get("sha256"), str):
                    self._drop_blob_if_bad(info)
            self._discard(key, str(exc))
            return None
        with contextlib.suppress(FileNotFoundError):
            os.utime(meta_path)  # last use, for LRU
        return CacheEntry(key=key, paths=paths, meta=meta)

    def _drop_blob_if_bad(self, info: Mapping[str, Any]) -> None:
        """Delete a blob whose bytes do not match its name (other entries would fail on it too)."""
        with contextlib.suppress(CacheEntryCorrupt):
            self._check_member("?", info)
            return
        self.blob_path(info["sha256"]).unlink(missing_ok=True)

    def put(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> CacheEntry:
        """Store each member once (by its sha256), then the entry's record; then evict down to ``max_bytes``."""
        members = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                   for name, data in sorted(files.items())}
        written: list[Path] = []
        try:
            for name, info in members.items():
                blob = self.blob_path(info["sha256"])
                if not blob.exists():  # already stored by another entry: each distinct file once
                    atomic_write_bytes(blob, files[name])
                    written.append(blob)
                info["stored"] = blob.stat().st_size
            record = {
                **meta, "generator": GENERATOR, "key": key,
                "size": sum(info["stored"] for info in members.values()),
                "raw_size": sum(info["size"] for info in members.values()),
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "files": members, **toolchain(),
            }
            atomic_write_bytes(self.meta_path(key), (json.dumps(record, indent=2) + "\n").encode())
        except BaseException:  # full disk, Ctrl-C: no blob that no entry names is left behind
            for blob in written:
                blob.unlink(missing_ok=True)
            raise
        self.evict(keep=key)
        return CacheEntry(key=key, paths={name: self.blob_path(info["sha256"]) for name, info in members.items()},
                          meta=record)

    # -- listing and housekeeping ----------------------------------------------------------
    def _records(self) -> list[tuple[Path, dict]]:
        """Every readable entry record written by this cache."""
        found = []
        for meta_path in (self.directory / "entries").glob("*.json"):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("generator") == GENERATOR and isinstance(meta.get("files"), dict):
                found.append((meta_path, meta))
        return found

    def entries(self) -> list[EntryInfo]:
        """Every readable entry, most recently used first (size: its members' stored bytes)."""
        found = []
        for meta_path, meta in self._records():
            with contextlib.suppress(OSError):
                found.append(EntryInfo(
                    key=meta_path.stem, model=str(meta.get("model", "?")), precision=str(meta.get("precision", "?")),
                    targets=",".join(meta.get("targets") or ["portable"]), size=int(meta.get("size", 0)),
                    last_use=meta_path.stat().st_mtime, created=str(meta.get("created", "?")),
                ))
        return sorted(found, key=lambda e: e.last_use, reverse=True)

    def _blobs(self) -> list[Path]:
        """Every stored blob (entry format 2's ``<sha256>.zst`` too, until no entry names it); no temp files."""
        return [blob for blob in (self.directory / "blobs").iterdir()
                if blob.suffix in ("", ".zst") and not blob.name.startswith(".")]

    def _blob_sizes(self) -> dict[str, int]:
        """sha256 → size of every stored blob."""
        sizes = {}
        for blob in self._blobs():
            with contextlib.suppress(OSError):
                sizes[blob.stem] = blob.stat().st_size
        return sizes

    def _members_of(self) -> dict[str, set[str]]:
        """entry key → the sha256 of its members."""
        return {path.stem: {info.get("sha256") for info in meta["files"].values() if isinstance(info, dict)}
                for path, meta in self._records()}

    def total_bytes(self) -> int:
        """What the blobs take on disk (each distinct file counted once)."""
        return sum(self._blob_sizes().values())

    def remove(self, key: str) -> None:
        """Delete an entry's record, and the blobs no other entry names."""
        self.meta_path(key).unlink(missing_ok=True)
        self.collect_garbage()

    def collect_garbage(self) -> int:
        """Delete blobs that no entry names (a removed entry, a crash before the record landed); their count."""
        named = set().union(*self._members_of().values())
        orphans = [blob for blob in self._blobs() if blob.stem not in named]
        for blob in orphans:
            blob.unlink(missing_ok=True)
        for legacy in (self.directory / "entries").glob("*.zst"):  # entry format 1
            legacy.unlink(missing_ok=True)
        return len(orphans)

    def evict(self, keep: str | None = None, max_bytes: int | None = None) -> list[EntryInfo]:
        """Delete least recently used entries (and their unshared blobs) until the blobs fit ``max_bytes``."""
        limit = self.max_bytes if max_bytes is None else max_bytes
        sizes, members = self._blob_sizes(), self._members_of()
        total = sum(sizes.values())
        removed = []
        for entry in reversed(self.entries()):  # oldest use first
            if total <= limit:
                break
            if entry.key == keep:
                continue
            mine = members.pop(entry.key, set())
            shared = set().union(*members.values())
            total -= sum(sizes.get(sha, 0) for sha in mine - shared)
            self.meta_path(entry.key).unlink(missing_ok=True)
            removed.append(entry)
            log.info("engine cache: evicted %s… (%s, %d bytes)", entry.key[:12], entry.model, entry.size)
        if removed:
            self.collect_garbage()
        return removed

    def prune(self, max_bytes: int | None = None, older_than_s: float | None = None) -> list[EntryInfo]:
        """Remove entries unused for ``older_than_s`` seconds, then evict to ``max_bytes``; tidy leftovers."""
        removed = []
        if older_than_s is not None:
            cutoff = time.time() - older_than_s
            for entry in self.entries():
                if entry.last_use < cutoff:
                    self.meta_path(entry.key).unlink(missing_ok=True)
                    removed.append(entry)
        removed += self.evict(max_bytes=max_bytes)
        self.collect_garbage()
        live = {e.key for e in self.entries()}
        for request in (self.directory / "requests").glob("*.json"):
            target = self.lookup_request(request.stem)
            if target not in live:
                request.unlink(missing_ok=True)
        self._remove_idle_locks()
        return removed

    def _remove_idle_locks(self) -> None:
        """Delete lock files nobody holds (taken first, so a running build keeps its own).

        A process that opened a lock file just before it was deleted may still build the same key
        as a newcomer: twice the work, never a broken entry (writes are atomic).
        """
        for path in (self.directory / "locks").glob("*.lock"):
            lock = FileLock(str(path))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue  # held: a build is running
            try:
                path.unlink(missing_ok=True)
            finally:
                lock.release()

    def clear(self) -> int:
        """Remove every entry, request record and idle lock file; return how many entries went."""
        count = len(self.entries())
        for folder in ("entries", "blobs", "requests"):
            for path in (self.directory / folder).iterdir():
                if path.is_file():
                    path.unlink(missing_ok=True)
        self._remove_idle_locks()
        return count


def open_engine_cache(directory: str | os.PathLike[str] | None) -> EngineCache | None:
    """The engine cache at ``directory`` when it can be written; else one warning line and None: the build
    goes on without a cache (a read-only HOME or cache folder, docs/reliability.md). A cache folder that is
    a file stays a refusal: that is a wrong option, not a machine's state.

    Example:
        >>> open_engine_cache("/read-only/cache") is None    # warning: the engine cache ... cannot be written
        True
    """
    try:
        cache = EngineCache(directory)
        with tempfile.NamedTemporaryFile(dir=cache.directory / "locks", prefix=".write-check-"):
            pass
    except NotAFolder:
        raise
    except OSError as exc:  # NotPermitted included: a folder that cannot be created
        where = directory if directory is not None else default_cache_dir()
        log.warning("the engine cache %s cannot be written (%s); building without it, nothing is cached. Pass %s "
                    "to a writable folder, or %s", where, getattr(exc.__cause__ or exc, "strerror", None) or exc,
                    option_spelling("cache_dir", "DIR"), spelled(cli="--no-cache", python="cache=False"))
        return None
    return cache
