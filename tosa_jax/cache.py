"""The persistent compile cache: a graph compiled once is not compiled again in another process.

An entry is one XLA executable, serialized by JAX (``jax.experimental.serialize_executable``),
keyed by everything that decides what XLA would build: the graph's bytes (SHA-256), the input
signature (shapes, dtypes, ``jax_enable_x64``), jax/jaxlib versions, the backend (platform,
platform version, device kind, device ids), the XLA compile options and ``XLA_FLAGS``, and
tosa_jax's own code (a digest of its source files, so a changed lowering never reuses an old
executable). A hit skips tracing, lowering and XLA compilation.

Where: ``$TOSA_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/tosa_jax``, else ``~/.cache/tosa_jax``;
``TOSA_JAX_CACHE=0`` (or ``off``) turns it off, ``load(..., cache=False)`` for one model.
Bounded: ``$TOSA_JAX_CACHE_MAX_BYTES`` (default 1 GiB); the least recently used entries go first.
``tosa-jax cache`` shows and clears it.

Entries are files written atomically (a temporary file, then ``os.replace``) with a header that
holds the full key and a CRC-32 of the rest. A truncated, damaged or foreign entry (another
key, another format) is removed and rebuilt, never loaded. (The check is against damage: a
digest in the same file would not stop whoever can write the directory.) The payload's numpy
arrays (weights) are stored beside its pickle, aligned, and read back as views of the file's
bytes, not copied out of them. The payload is JAX's own
serialization of native code, like JAX's own compilation cache: the directory is created
private to the user (mode 0700) and only entries this module wrote are read.

A graph file's SHA-256 is also kept, keyed by the file's path, device, inode, size,
modification and change times (``file_digest``): ``load(path)`` of a file hashed before and
unchanged since finds its entries without reading the file (the graph, if later needed, is read
and checked against that digest). Only for a file unchanged for SETTLED_S seconds: file times
are as coarse as the kernel's clock tick.

A model stores what it compiled with ``put_later``: serialized and written by a background
thread, so that its first result does not wait for the write (``flush`` waits for them all;
so does the interpreter's exit).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MAGIC = b"TOSAJAXC2\n"
SUFFIX = ".xla"
# An entry: MAGIC, the key's length (4 bytes) and text, the CRC-32 of the rest (4), the number
# of arrays (4), the pickle's length (8) and each array's (8), the pickle (protocol 5, its
# arrays out of band), then each array's bytes at a file offset that is a multiple of ALIGN
# (what XLA's CPU client takes without a copy). Integers little-endian.
ALIGN = 64
DEFAULT_MAX_BYTES = 1 << 30
SETTLED_S = 2.0  # see CompileCache.remember_digest


def default_dir() -> Path:
    """The cache directory the environment names (not created here)."""
    env = os.environ.get("TOSA_JAX_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tosa_jax"


def enabled_by_env() -> bool:
    return os.environ.get("TOSA_JAX_CACHE", "1").strip().lower() not in ("0", "off", "false",
                                                                          "no")


def max_bytes_from_env(var: str = "TOSA_JAX_CACHE_MAX_BYTES",
                       default: int = DEFAULT_MAX_BYTES) -> int:
    """A cache's bound from the environment variable ``var`` (``default`` when unset or bad)."""
    try:
        return int(os.environ.get(var, default))
    except ValueError:
        return default


@cache
def code_digest() -> str:
    """A digest of tosa_jax's installed source files (name, size, mtime): any edit changes it
    (tosa_jax.testing, the helpers of tests/ and bench/, is not runtime code and does not count).
    Once per process; os.scandir keeps it near a millisecond."""
    import importlib.util

    import tosa_jax

    roots = [os.path.dirname(tosa_jax.__file__)]
    for sub in ("lowering", "profiles"):
        # Found without importing them (a cached run never does): in an editable install they
        # lie beside tosa_jax/, not under it, and must count whether imported yet or not.
        spec = importlib.util.find_spec(f"tosa_jax.{sub}")
        for loc in (spec.submodule_search_locations or []) if spec is not None else []:
            roots.append(os.fspath(loc))
    h = hashlib.sha256()
    for root in sorted(set(roots)):
        stack = [root]
        while stack:
            with os.scandir(stack.pop()) as it:
                for e in sorted(it, key=lambda e: e.name):
                    if e.is_dir() and e.name not in ("__pycache__", "testing"):
                        stack.append(e.path)
                    elif e.name.endswith(".py"):
                        st = e.stat()
                        h.update(f"{e.path}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:24]


@dataclass
class CacheStats:
    directory: Path
    entries: int
    bytes: int
    max_bytes: int
    enabled: bool

    def __str__(self) -> str:
        state = "on" if self.enabled else "off (TOSA_JAX_CACHE)"
        return (f"tosa_jax compile cache: {self.directory}\n"
                f"  {self.entries} entries, {self.bytes / 2**20:.1f} MiB of "
                f"{self.max_bytes / 2**20:.0f} MiB; {state}")


class CompileCache:
    """Payloads on disk by key (a JSON-able dict), least recently used out first past
    ``max_bytes``. ``get`` returns None on any miss. The compile cache's entries are XLA
    executables; the conversion cache (``frontends._cache``) keeps converted flatbuffers in
    another directory with another ``suffix``, by the same rules."""

    def __init__(self, directory: str | os.PathLike | None = None,
                 max_bytes: int | None = None, suffix: str = SUFFIX) -> None:
        self.directory = Path(directory) if directory is not None else default_dir()
        self.max_bytes = max_bytes if max_bytes is not None else max_bytes_from_env()
        self.suffix = suffix
        # The directory's size as of the last scan plus what this process wrote since: a scan
        # (and eviction) only when it may be over the bound, so a run that writes thousands
        # of entries (the conformance suite) does not list the directory per entry.
        self._total: int | None = None

    # -- keys and files ---------------------------------------------------------------------

    @staticmethod
    def key_text(key: dict[str, Any]) -> bytes:
        return json.dumps(key, sort_keys=True, separators=(",", ":")).encode()

    def path(self, key: dict[str, Any]) -> Path:
        return self.directory / (hashlib.sha256(self.key_text(key)).hexdigest() + self.suffix)

    def get(self, key: dict[str, Any]) -> Any | None:
        """The payload stored under ``key``, or None (absent, damaged or foreign: removed).
        A write of ``key`` that this process has under way is waited for."""
        path = self.path(key)
        _wait(path)
        try:
            data = _read_aligned(path)
        except OSError:
            return None
        payload = self._decode(data, self.key_text(key))
        if payload is None:
            self._remove(path)
            return None
        try:
            os.utime(path)  # recently used: kept longest
        except OSError:
            pass
        return payload

    def put(self, key: dict[str, Any], payload: Any) -> None:
        """Store ``payload`` (picklable) under ``key``; errors (read-only disk...) are ignored:
        a cache that cannot be written only costs the next process a compile."""
        try:
            key_text = self.key_text(key)
            parts = _encode(payload, MAGIC + len(key_text).to_bytes(4, "little") + key_text)
            size = sum(len(b) for b in parts)
            if size > self.max_bytes:
                return
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            import tempfile  # (here: its import takes milliseconds a load from the cache skips)

            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    for b in parts:
                        f.write(b)
                os.replace(tmp, self.path(key))
            except BaseException:
                self._remove(Path(tmp))
                raise
            if self._total is not None:
                self._total += size
            if self._total is None or self._total > self.max_bytes:
                self._evict()
        except (OSError, pickle.PicklingError, TypeError, ValueError, AttributeError,
                BufferError):
            pass

    # -- graph files' digests ----------------------------------------------------------------

    @staticmethod
    def _file_key(path: str, st: os.stat_result) -> dict[str, Any]:
        return {"kind": "file", "path": os.path.abspath(path), "dev": st.st_dev,
                "ino": st.st_ino, "size": st.st_size, "mtime": st.st_mtime_ns,
                "ctime": st.st_ctime_ns}

    def file_digest(self, path: str, st: os.stat_result) -> str | None:
        """The SHA-256 remember_digest stored for the file at ``path`` (``st``: its
        ``os.stat``), if it has not changed since: the same path, device, inode, size,
        modification and change time (no one sets a change time back). Else None."""
        digest = self.get(self._file_key(path, st)) if st.st_ino else None
        return digest if isinstance(digest, str) else None

    def remember_digest(self, path: str, st: os.stat_result, digest: str) -> None:
        """Keep ``digest``, the SHA-256 of the file at ``path`` (``st``: its ``os.stat``,
        taken before it was read), for file_digest: a graph loaded again from the cache is
        then not read and hashed (a millisecond a megabyte: mobilenetv2_fp32's 14 MB, 14 ms).
        Not when the file changed in the last SETTLED_S (timestamps are as coarse as the
        kernel's clock tick, so a second write within it could keep the same times), nor on a
        file system without inode numbers."""
        if st.st_ino and time.time() - max(st.st_mtime, st.st_ctime) > SETTLED_S:
            key = self._file_key(path, st)
            self.put_later(key, lambda: digest)  # (off the first result's path)

    def put_later(self, key: dict[str, Any], make: Callable[[], Any | None],
                  after: Callable[[], None] | None = None) -> None:
        """``put(key, make())`` in a background thread, ``make()`` included: serializing and
        writing an executable takes 10-200 ms (resnet_fp32's 12 MB of weights 160 ms, in a
        1.7 s first result; lstm_int8 210 ms) that a first result need not wait for. Writes
        of one key are done in the order asked (a quick-tier executable, then the optimized
        one that replaces it); ``make`` returning None (or raising) stores nothing. ``after``:
        called (in that thread) before ``make``, to wait for something first (the first
        result of the executable written: see tosa_jax.model's ``_FirstResult``); it must
        return in bounded time. Not a daemon thread, also when asked from one (a thread
        inherits its starter's daemon flag): the interpreter's exit waits for it, as does
        ``flush()``."""
        path = self.path(key)

        def write(before: threading.Thread | None) -> None:
            if before is not None:
                before.join()
            try:
                if after is not None:
                    after()
                payload = make()
            except Exception:
                payload = None
            if payload is not None:
                self.put(key, payload)
            with _PENDING_LOCK:
                if _PENDING.get(path) is threading.current_thread():
                    del _PENDING[path]

        with _PENDING_LOCK:
            before = _PENDING.get(path)
            thread = threading.Thread(target=write, args=(before,), name="tosa_jax-cache-write",
                                      daemon=False)
            _PENDING[path] = thread
            thread.start()

    @staticmethod
    def _decode(data: memoryview, key_text: bytes) -> Any | None:
        """The payload of an entry's bytes (``_read_aligned``), or None: not an entry of this
        format, of another key, or damaged."""
        at = len(MAGIC)
        if bytes(data[:at]) != MAGIC or len(data) < at + 4:
            return None
        n = int.from_bytes(data[at:at + 4], "little")
        at += 4
        if bytes(data[at:at + n]) != key_text:  # another key under the same file name: foreign
            return None
        at += n
        if len(data) < at + 16 or zlib.crc32(data[at + 4:]) != int.from_bytes(
                data[at:at + 4], "little"):
            return None
        count = int.from_bytes(data[at + 4:at + 8], "little")
        at += 8
        if 8 * (count + 1) > len(data) - at:
            return None
        try:
            sizes = [int.from_bytes(data[at + 8 * i:at + 8 * i + 8], "little")
                     for i in range(count + 1)]
            at += 8 * (count + 1)
            stream = data[at:at + sizes[0]]
            at += sizes[0]
            arrays = []
            for size in sizes[1:]:
                at += -at % ALIGN
                arrays.append(data[at:at + size])
                at += size
            if at != len(data) or len(stream) != sizes[0]:
                return None
            return pickle.loads(stream, buffers=arrays)
        except Exception:
            return None

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        try:
            for p in self.directory.iterdir():
                if p.name.endswith(self.suffix) or p.name.startswith(".tmp-"):
                    try:
                        st = p.stat()
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, p))
        except OSError:
            pass
        return out

    def _evict(self) -> None:
        """Remove the least recently used entries until the cache holds at most 90% of its
        bound (some room, so that the next scan is not at the next write)."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        goal = self.max_bytes if total <= self.max_bytes else int(self.max_bytes * 0.9)
        stale = time.time() - 3600  # temporaries of a crashed writer
        for mtime, size, path in entries:
            if total <= goal and not (path.name.startswith(".tmp-") and mtime < stale):
                continue
            self._remove(path)
            total -= size
        self._total = total

    # -- the command line's view --------------------------------------------------------------

    def stats(self) -> CacheStats:
        flush()  # this process's writes under way count, once on disk
        entries = [e for e in self._entries() if e[2].name.endswith(self.suffix)]
        return CacheStats(self.directory, len(entries), sum(s for _, s, _ in entries),
                          self.max_bytes, enabled_by_env())

    def clear(self) -> int:
        """Remove every entry; returns how many were removed (this process's writes under way
        first: one landing after the clear would outlive it)."""
        flush()
        entries = self._entries()
        for _, _, path in entries:
            self._remove(path)
        return len(entries)


def _encode(payload: Any, header: bytes) -> list[Any]:
    """An entry's bytes, in parts (its arrays are not copied into one string): ``header``
    (MAGIC and the key), then the layout described at ALIGN."""
    arrays: list[pickle.PickleBuffer] = []
    stream = pickle.dumps(payload, protocol=5, buffer_callback=arrays.append)
    raw = [a.raw() for a in arrays]  # (BufferError for a non-contiguous one: not stored)
    head = len(header) + 8 + 8 * (len(raw) + 1)
    sizes = b"".join(len(b).to_bytes(8, "little") for b in (stream, *raw))
    parts: list[Any] = [len(raw).to_bytes(4, "little") + sizes, stream]
    at = head + len(stream)
    for b in raw:
        parts.append(bytes(-at % ALIGN))
        at += len(parts[-1])
        parts.append(b)
        at += len(b)
    crc = 0
    for b in parts:
        crc = zlib.crc32(b, crc)
    return [header, crc.to_bytes(4, "little"), *parts]


def _read_aligned(path: Path) -> memoryview:
    """The file's bytes in a buffer that starts at a multiple of ALIGN in memory."""
    import numpy as np  # (tosa_jax's runtime depends on numpy; a cached load imports it anyway)

    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        raw = np.empty(size + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        view = memoryview(raw[start:start + size])
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
    return view[:got]


# Writes under way in this process (put_later), by entry path: the last one asked for each.
_PENDING: dict[Path, threading.Thread] = {}
_PENDING_LOCK = threading.Lock()


def _wait(path: Path) -> None:
    """Wait for this process's writes of ``path`` (none: returns at once)."""
    with _PENDING_LOCK:
        thread = _PENDING.get(path)
    if thread is not None and thread is not threading.current_thread():
        thread.join()
        with _PENDING_LOCK:
            if _PENDING.get(path) is thread:
                del _PENDING[path]


def flush() -> None:
    """Wait until every cache write this process has under way is on disk."""
    with _PENDING_LOCK:
        paths = list(_PENDING)
    for path in paths:
        _wait(path)


def open_cache(option: bool | str | os.PathLike | CompileCache | None) -> CompileCache | None:
    """The cache a ``load(..., cache=option)`` uses: None/True -> the environment's (None when
    turned off there), False -> none, a path -> that directory, a CompileCache as it is."""
    if option is False:
        return None
    if isinstance(option, CompileCache):
        return option
    if option is None or option is True:
        return shared(str(default_dir()), max_bytes_from_env()) if enabled_by_env() else None
    return shared(os.fspath(option), max_bytes_from_env())


_SHARED: dict[tuple[str, int, str], CompileCache] = {}


def shared(directory: str, max_bytes: int, suffix: str = SUFFIX) -> CompileCache:
    """One CompileCache per directory, bound and suffix in a process: its running size
    estimate then spares every new Model a scan of the directory."""
    key = (directory, max_bytes, suffix)
    if key not in _SHARED:
        _SHARED[key] = CompileCache(directory, max_bytes, suffix)
    return _SHARED[key]
