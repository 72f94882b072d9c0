"""The conversion cache: a model converted once (TFLite or MLIR -> TOSA flatbuffer) is not
converted again, in this process or another.

Keyed by content: SHA-256 of the input bytes, the converter chain and its versions, and the
options. Entries live in ``<root>/convert/`` where root is ``$TOSA_JAX_CACHE_DIR``, else
``$XDG_CACHE_HOME/tosa_jax``, else ``~/.cache/tosa_jax`` (the compile cache's root; this
subdirectory is ours alone). ``TOSA_JAX_CACHE=0`` turns it off. Bounded by
``$TOSA_JAX_CONVERT_CACHE_MAX_BYTES`` (default 256 MiB): the least recently used entries go.

An entry is written atomically (temporary file, then ``os.replace``) with a SHA-256 of its
payload; one that does not match (truncated, damaged) is removed and converted again. Every
payload is a TOSA flatbuffer that the reader checks like any other file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

MAGIC = b"TOSAJAXV1\n"
SUFFIX = ".tosa-conv"
DEFAULT_MAX_BYTES = 256 << 20


def root_dir() -> Path:
    """The cache root the environment names: the compile cache's (not created here)."""
    from tosa_jax.cache import default_dir

    return default_dir()


def cache_dir() -> Path:
    return root_dir() / "convert"


def enabled() -> bool:
    from tosa_jax.cache import enabled_by_env

    return enabled_by_env()


def max_bytes() -> int:
    try:
        return int(os.environ.get("TOSA_JAX_CONVERT_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def key(data: bytes, *parts: str) -> str:
    """The entry name for ``data`` converted by the chain and options named in ``parts``."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() + b"\0")
    h.update(data)
    return h.hexdigest()


def get(name: str) -> bytes | None:
    """The cached payload, or None (absent, damaged, or the cache is off)."""
    if not enabled():
        return None
    path = cache_dir() / (name + SUFFIX)
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    head, digest, payload = blob[:len(MAGIC)], blob[len(MAGIC):len(MAGIC) + 32], \
        blob[len(MAGIC) + 32:]
    if head != MAGIC or hashlib.sha256(payload).digest() != digest:
        _remove(path)
        return None
    try:
        os.utime(path)  # least recently *used* goes first
    except OSError:
        pass
    return payload


def put(name: str, payload: bytes) -> None:
    """Store a payload; a cache that cannot be written is skipped silently (it is only a cache)."""
    if not enabled() or len(payload) > max_bytes():
        return
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, directory / (name + SUFFIX))
    except OSError:
        return
    _evict(directory)


def cached(name: str, produce: Callable[[], bytes]) -> tuple[bytes, bool]:
    """``(payload, hit)``: the cached payload, or ``produce()``'s, stored for next time."""
    payload = get(name)
    if payload is not None:
        return payload, True
    payload = produce()
    put(name, payload)
    return payload, False


def clear() -> int:
    """Remove every entry; returns how many."""
    n = 0
    for _, _, path in _entries(cache_dir()):
        n += _remove(path)
    return n


def _entries(directory: Path) -> list[tuple[float, int, Path]]:
    out = []
    try:
        for p in directory.iterdir():
            if p.suffix == SUFFIX:
                try:
                    st = p.stat()
                except OSError:
                    continue
                out.append((st.st_mtime, st.st_size, p))
    except OSError:
        pass
    return out


def _evict(directory: Path) -> None:
    entries = sorted(_entries(directory))
    total = sum(size for _, size, _ in entries)
    limit = max_bytes()
    for _, size, path in entries:
        if total <= limit:
            break
        if _remove(path):
            total -= size


def _remove(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0
