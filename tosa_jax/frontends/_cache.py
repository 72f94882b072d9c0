"""The conversion cache: a model converted once (TFLite or MLIR -> TOSA flatbuffer) is not
converted again, in this process or another.

Keyed by content: SHA-256 of the input bytes, the converter chain and its versions, and the
options. Entries live in ``<root>/convert/`` where root is ``$TOSA_JAX_CACHE_DIR``, else
``$XDG_CACHE_HOME/tosa_jax``, else ``~/.cache/tosa_jax`` (the compile cache's root; this
subdirectory is ours alone). ``TOSA_JAX_CACHE=0`` turns it off. Bounded by
``$TOSA_JAX_CONVERT_CACHE_MAX_BYTES`` (default 256 MiB): the least recently used entries go.

The store is the compile cache's (``tosa_jax.cache.CompileCache``: atomic writes, the full key
and a SHA-256 of the payload in every entry, a damaged or foreign entry removed and converted
again, least recently used out first), in its own directory with its own suffix. Every payload
is a TOSA flatbuffer that the reader checks like any other file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from tosa_jax.cache import CompileCache, default_dir, enabled_by_env, max_bytes_from_env, shared

SUFFIX = ".tosa-conv"
DEFAULT_MAX_BYTES = 256 << 20


def cache_dir() -> Path:
    return default_dir() / "convert"


def max_bytes() -> int:
    return max_bytes_from_env("TOSA_JAX_CONVERT_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)


def _store() -> CompileCache | None:
    """The environment's conversion cache, None when caching is turned off."""
    return shared(str(cache_dir()), max_bytes(), SUFFIX) if enabled_by_env() else None


def key(data: bytes, *parts: str) -> str:
    """The entry name for ``data`` converted by the chain and options named in ``parts``."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() + b"\0")
    h.update(data)
    return h.hexdigest()


def get(name: str) -> bytes | None:
    """The cached payload, or None (absent, damaged, or the cache is off)."""
    store = _store()
    payload = None if store is None else store.get({"convert": name})
    return payload if isinstance(payload, bytes) else None


def put(name: str, payload: bytes) -> None:
    """Store a payload; a cache that cannot be written is skipped silently (it is only a cache)."""
    store = _store()
    if store is not None:
        store.put({"convert": name}, payload)


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
    return CompileCache(cache_dir(), max_bytes(), SUFFIX).clear()
