"""What every converter shares: running an external tool with a time limit and progress, and
finding the optional packages behind each format."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tosa_jax.errors import TosaConverterError, TosaConverterMissingError

# What to install for each front door (the optional extras of pyproject.toml).
EXTRAS = {
    "mlir": "pip install 'tosa_jax[mlir]'  (tosa-tools==2026.8.0, which ships tosa-opt)",
    "tflite": "pip install 'tosa_jax[tflite]'  (tosa-converter-for-tflite==2026.2.0 and "
              "tosa-tools==2026.8.0)",
    "torch": "pip install 'tosa_jax[torch]'  (torch==2.13.0, executorch==1.5.1, "
             "tosa-tools==2026.8.0)",
}

PROGRESS_AFTER_S = 1.0  # conversions quicker than this print nothing
TIMEOUT_S = 3600.0


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing(extra: str, what: str) -> TosaConverterMissingError:
    return TosaConverterMissingError(f"{what} is not installed; {EXTRAS[extra]}")


def find_executable(name: str) -> str | None:
    """``name`` next to the running Python (its virtualenv's bin), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


class Progress:
    """Elapsed time of a conversion on stderr, shown only once it has taken over a second.

    On a terminal one line is rewritten in place; otherwise one line when it starts showing and
    one when it ends."""

    def __init__(self, what: str, enabled: bool = True) -> None:
        self.what, self.enabled = what, enabled
        self.step = ""
        self._stop = threading.Event()
        self._shown = False
        self._tty = sys.stderr.isatty()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self.t0 = time.perf_counter()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def set_step(self, step: str) -> None:
        self.step = step

    def _line(self) -> str:
        step = f" [{self.step}]" if self.step else ""
        return f"tosa_jax: converting {self.what}{step}: {time.perf_counter() - self.t0:.1f} s"

    def _run(self) -> None:
        if self._stop.wait(PROGRESS_AFTER_S):
            return
        self._shown = True
        if not self._tty:
            sys.stderr.write(self._line() + " ...\n")
            sys.stderr.flush()
            return
        while not self._stop.wait(0.2):
            sys.stderr.write("\r" + self._line() + "\033[K")
            sys.stderr.flush()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            outcome = "failed" if exc_type else "done"
            text = (f"tosa_jax: converting {self.what}: {outcome} in "
                    f"{time.perf_counter() - self.t0:.1f} s")
            sys.stderr.write(f"\r{text}\033[K\n" if self._tty else text + "\n")
            sys.stderr.flush()


# Lines of a converter's stderr that say nothing about the input.
_NOISE = ("WARNING: Different TOSA spec", "WARNING: All log messages before absl",
          "Traceback (most recent call last)", '  File "<string>"')


def run_tool(cmd: Sequence[str], *, names: dict[str, str] | None = None,
             tool: str | None = None, cwd: str | None = None) -> str:
    """Run a converter; its stderr (less known noise) on success, a TosaConverterError with the
    tool's own message on failure. ``names`` maps temporary file paths in that message back to
    what the user knows them by."""
    tool = tool or Path(cmd[0]).name
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise TosaConverterError(f"{tool} ran over {TIMEOUT_S:.0f} s") from e
    except OSError as e:
        raise TosaConverterError(f"cannot run {cmd[0]}: {e}") from e
    err = "\n".join(line for line in (proc.stderr or "").splitlines()
                    if not line.startswith(_NOISE))
    for tmp, name in (names or {}).items():
        err = err.replace(tmp, name)
    if proc.returncode != 0:
        tail = (err.strip() or (proc.stdout or "").strip())[-3000:]
        raise TosaConverterError(f"{tool} failed (exit {proc.returncode}):\n{tail}")
    return err
