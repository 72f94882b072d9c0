"""Where a graph's batch-1 call spends its time on the CPU, kernel by kernel: XLA's own trace of
each thunk of the optimized executable (loop fusions, YNNPACK and Eigen kernels), averaged over
calls, with each loop fusion's size in HLO instructions.

    python bench/thunk_profile.py .cache/zoo/unet_int8.tosa [--calls 50] [--top 25]

Inputs: ``<graph>.input.npy`` beside the graph, else zeros (``tosa_jax.testing.sample_inputs``).
XLA CPU records a trace event per thunk when ``--xla_cpu_enable_xprof_traceme`` is set before
its backend starts (this script sets it); ``jax.profiler`` collects them and
``jax.profiler.ProfileData`` reads them back, no TensorBoard needed. A fusion far slower per
element than its neighbours, or far larger, is where to look (2026-11-27: unet_int8's group
norms held each group's statistics chain, about 100 operations, recomputed for every element:
``tosa_jax.executor``'s shared values). Every thunk named after an instruction of the entry
computation is listed.

Two times a kernel: its thunk's event, and its span, from that event's start to the thunk's
``end:`` marker. They differ for the kernels XLA runs asynchronously, Eigen's convolutions and
products: the event ends when the work is handed to the thread pool, the marker is recorded
when the last part of it is done (or a little later, when the thread that finishes it gets to
its callback: spans are an upper bound, events a lower one). The header gives the part of a
call during which some listed kernel is in flight. Before 2026-11-28 (thirty-sixth session)
only events were listed, which read unet_fp32's 13 convolutions as 432 us of a 1,540-1,600 us
call and about 40% of it as the executor's time between kernels; their spans are 1,500-1,900
us, a listed kernel is in flight for 97% of the call, and one of its 32x32x32 -> 32
convolutions alone runs in 166-180 us (the thirty-fifth session's measure), as its spans say.
Kernels on other threads overlap: their times add up to more than the call's; the tracing
itself adds a little to each kernel (compare kernels with each other, not with the benchmark's
figures).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_enable_xprof_traceme=true").strip()

import jax  # noqa: E402  (after XLA_FLAGS: read when the backend starts)
import numpy as np  # noqa: E402

import tosa_jax  # noqa: E402
from tosa_jax.testing import sample_inputs  # noqa: E402


def fusion_sizes(hlo: str) -> dict[str, int]:
    """Instructions in each fusion's fused computation, by the fusion's name."""
    bodies = {m.group(1): m.group(2).count("\n") for m in re.finditer(
        r"^(%[\w.\-]+) [^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M)}
    return {m.group(1): bodies.get(m.group(2), 0) for m in re.finditer(
        r"%([\w.\-]+) = [^\n]* fusion\([^\n]*calls=(%[\w.\-]+)", hlo)}


def entry_instructions(hlo: str) -> set[str]:
    """The names of the entry computation's instructions: what its thunks are named after
    (fusions, library products and convolutions, copies...)."""
    entry = re.search(r"^ENTRY [^\n]*\{\n(.*?)\n\}", hlo, re.S | re.M)
    return set() if entry is None else set(re.findall(r"^\s+(?:ROOT )?%([\w.\-]+) = ",
                                                       entry.group(1), re.M))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graph")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    model = tosa_jax.load(args.graph, cache=False)
    inputs = sample_inputs(model, args.graph)
    print(f"compiling {args.graph} ...", file=sys.stderr, flush=True)
    model.compile(*inputs)
    slot = next(iter(model._executables.values()))
    hlo = slot.exe.as_text()
    sizes = fusion_sizes(hlo)
    thunks = entry_instructions(hlo)
    for _ in range(10):
        jax.block_until_ready(model(*inputs))

    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.calls):
            jax.block_until_ready(model(*inputs))
        jax.profiler.stop_trace()
        trace = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
        profile = jax.profiler.ProfileData.from_file(trace)

    # Every thunk event (start, duration) and its "end: NAME" markers, on whichever thread each
    # was recorded (see the module's docstring).
    calls: list[tuple[int, int]] = []
    events: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    ends: dict[str, list[int]] = collections.defaultdict(list)
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                name = event.name
                if name == "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice":
                    calls.append((event.start_ns, event.duration_ns))
                elif name.startswith("end: ") and name[5:] in thunks:
                    ends[name[5:]].append(event.start_ns + event.duration_ns)
                elif name in thunks or name.startswith(("dot", "wrapped_", "copy")):
                    events[name].append((event.start_ns, event.duration_ns))
    calls.sort()
    launch: collections.Counter[str] = collections.Counter()
    span: collections.Counter[str] = collections.Counter()
    intervals = []
    for name, started in events.items():
        done = sorted(ends.get(name, ()))
        for t, duration in sorted(started):
            # the first end marker after this start; none: the event is the kernel's run
            i = next((j for j, e in enumerate(done) if e >= t), None)
            stop = done.pop(i) if i is not None else t + duration
            launch[name] += duration / 1e3 / args.calls
            span[name] += (stop - t) / 1e3 / args.calls
            intervals.append((t, stop))
    intervals.sort()
    covered = []
    for t0, dur in calls:  # the part of each call some listed kernel is in flight
        busy, end = 0, t0
        for a, b in intervals:
            a, b = max(a, end), min(b, t0 + dur)
            if b > a:
                busy += b - a
                end = b
        covered.append(busy / dur if dur else 0.0)
    median_call = float(np.median([d for _, d in calls])) / 1e3
    print(f"{args.graph}: executable {median_call:.1f} us a call (median of {len(calls)}), "
          f"{len(sizes)} fusions; some listed kernel in flight {100 * np.median(covered):.0f}% "
          "of a call")
    print(f"{'span us':>9} {'event us':>9} {'instr':>6}  kernel   (span: from the thunk's "
          "start to its end marker, an asynchronous kernel's whole run)")
    for name, us in span.most_common(args.top):
        print(f"{us:9.1f} {launch[name]:9.1f} {sizes.get(name, 0):6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
