"""The ``tosa-jax`` command line: ``run`` a graph on .npy inputs, ``info`` about a graph,
``check`` what it requires (profiles, extensions, level) and whether it is valid TOSA,
``partition`` it across device models (NPU, GPU, CPU) with a cost estimate, show or clear the
persistent compile ``cache``, ``inspect`` every intermediate tensor against the reference model,
another graph or a dump, ``convert`` it between formats. Every command takes a TOSA flatbuffer,
TOSA MLIR (text or bytecode) or a TFLite model, told apart by content."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tosa_jax.errors import TosaError, TosaInputError

if TYPE_CHECKING:
    from tosa_jax.model import Model
# JAX, the lowerings and profiles are imported by the commands that need them, so that
# ``--help`` and mistakes in the arguments answer at once.


def _parse_inputs(model: Model, specs: list[str], mmap: bool = False) -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` pairs, or plain files in the graph's input order; ``mmap``: mapped,
    not read (``eval`` reads only the samples of its own share)."""
    names = [s.name for s in model.inputs]
    inputs: dict[str, np.ndarray] = {}
    for i, spec in enumerate(specs):
        name, sep, path = spec.rpartition("=")
        if not sep:
            if i >= len(names):
                raise TosaInputError(f"{len(specs)} input files given; the graph takes {names}")
            name = names[i]
        try:
            inputs[name] = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
        except (OSError, ValueError) as e:
            raise TosaInputError(f"input {name!r}: cannot read {path}: {e}") from e
    return inputs


def cmd_info(args: argparse.Namespace) -> int:
    from tosa_jax.frontends import read_source

    g = read_source(args.graph)  # no lowering needed to describe a graph
    major, minor, patch, draft = g.version
    print(f"{args.graph}: TOSA {major}.{minor}.{patch}{'-draft' if draft else ''}")
    print(f"regions: {len(g.regions)}, blocks: {sum(len(r.blocks) for r in g.regions)}")
    for title, names in (("inputs", g.main.inputs), ("outputs", g.main.outputs)):
        print(f"{title}:")
        for name in names:
            t = g.main.tensors[name]
            print(f"  {name}: {t.dtype} {list(t.shape)}")
    print("operators:")
    for op, n in sorted(g.operator_counts().items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {op:<24} {n}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Print what a graph requires and any ERROR_IF it breaks; 0 when valid (for the target)."""
    from tosa_jax import profiles  # reads the IR only: no JAX tracing, no lowering
    from tosa_jax.frontends import read_source

    profile = args.profile[0] if args.profile and len(args.profile) == 1 else args.profile
    try:
        target = profiles.make_target(profile, args.extension, args.level)
    except profiles.TosaNameError as e:
        print(f"tosa-jax: error: {e}", file=sys.stderr)
        return 2
    graph = read_source(args.graph)
    analysis = profiles.analyse(graph)
    req = profiles.requirements_of(analysis)
    major, minor, patch, draft = graph.version
    print(f"{args.graph}: TOSA {major}.{minor}.{patch}{'-draft' if draft else ''}, "
          f"{len(req.operators)} operators")
    print(req.table())
    for c in req.runtime_checks:  # EXT-DYNAMIC zero points: known when the graph runs
        print(f"checked when the graph runs: {c.op} (operator #{c.index} of block {c.block!r}) "
              f"argument {c.argument!r} (tensor {c.tensor!r}): {c.rule}")
    for note in target.notes:
        print(f"note: {note}")
    problems = profiles.check_target(analysis, target) if not analysis.violations else []
    if req.valid and not problems:
        print(f"valid for {target.describe()}")
        return 0
    for p in problems:
        print(f"needs more: {p}")
    print("NOT VALID" + ("" if req.valid else ": the graph breaks the rules above")
          + (f" for {target.describe()}" if problems else ""))
    return 1


def cmd_run(args: argparse.Namespace) -> int:
    from tosa_jax.model import load

    # A run-once process: a small float graph runs on its numpy program, as through
    # tosa_jax.reference_model.run, rather than paying an XLA compile for one call (see the
    # README, "Float graphs run once"); --xla-floats keeps XLA's float code, whose bits are
    # what model(x) and evaluate give.
    model = load(args.graph, device=args.device, check_requires=args.check_requires,
                 numpy_floats=not args.xla_floats)
    inputs = _parse_inputs(model, args.inputs)
    t0 = time.perf_counter()
    outputs = model.run(inputs)
    t1 = time.perf_counter()
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    for name, value in outputs.items():
        line = f"{name}: {value.dtype} {list(value.shape)}"
        if out_dir:
            path = out_dir / f"{name}.npy"
            np.save(path, value)
            line += f" -> {path}"
        print(line)
        if args.print:
            print(np.array2string(value, threshold=64))
    how = {"cache": "ran (executable from the compile cache)",
           "numpy": "traced and ran with numpy (tosa_jax.npexec: no XLA compile)",
           "numpy, cache": "ran with numpy (program from the compile cache)"}.get(
        model.compile_source or "", "compiled and ran")
    print(f"{how} in {t1 - t0:.3f} s", file=sys.stderr)
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """Show the persistent compile cache, or clear it."""
    from tosa_jax.cache import CompileCache

    cache = CompileCache(args.dir)
    if args.clear:
        n = cache.clear()
        print(f"removed {n} entries from {cache.directory}")
        return 0
    print(cache.stats())
    return 0


def _cpu_devices_unset() -> bool:
    """Whether nothing (JAX_NUM_CPU_DEVICES, jax.config, XLA_FLAGS) chose the CPU device count."""
    import jax

    return (jax.config.jax_num_cpu_devices in (None, -1)
            and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""))


def cmd_eval(args: argparse.Namespace) -> int:
    """Run a batch-1 graph over stacked samples (vmapped, sharded over devices)."""
    import jax

    from tosa_jax.evaluate import evaluate, usable_cores
    from tosa_jax.model import load

    if args.host_devices:
        try:  # only possible before JAX has started its CPU backend
            jax.config.update("jax_num_cpu_devices", args.host_devices)
        except RuntimeError as e:
            raise TosaInputError(f"--host-devices: {e}") from e
    elif args.coordinator is None and _cpu_devices_unset():
        # One process: one CPU device per core by default. evaluate() shards each batch over
        # the devices, and a single device runs a small graph on about one core (XLA's
        # intra-op threads split only large kernels). (Several processes keep JAX's one device
        # each unless --host-devices says otherwise.)
        try:
            jax.config.update("jax_num_cpu_devices", usable_cores())
        except RuntimeError:
            pass  # JAX's CPU backend already started (an embedding caller): keep its devices
    given = [args.coordinator, args.num_processes, args.process_id]
    if any(v is not None for v in given):
        if any(v is None for v in given):
            raise TosaInputError("several processes need all of --coordinator, --num-processes "
                                 "and --process-id")
        if not 0 <= args.process_id < args.num_processes:
            raise TosaInputError(f"--process-id {args.process_id} is not in 0 to "
                                 f"--num-processes - 1 = {args.num_processes - 1}")
        try:  # JAX's own multi-process runtime; before any backend starts
            jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                                       process_id=args.process_id,
                                       initialization_timeout=args.timeout)
        except (RuntimeError, ValueError) as e:
            raise TosaInputError(f"cannot join the {args.num_processes} processes through "
                                 f"{args.coordinator}: {e}") from e
    lead = jax.process_index() == 0  # the process that prints and writes
    model = load(args.graph, device=args.device)
    samples = _parse_inputs(model, args.inputs, mmap=True)
    labels = None
    if args.labels:
        try:
            labels = np.load(args.labels, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise TosaInputError(f"cannot read labels {args.labels}: {e}") from e
    result = evaluate(model, samples, labels=labels, metric=args.metric,
                      batch_size=args.batch_size, progress=lead and not args.quiet,
                      axis=args.axis)
    if not lead:
        return 0
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in result.outputs.items():
            np.save(out_dir / f"{name}.npy", value)
        if result.predictions is not None:
            np.save(out_dir / "predictions.npy", result.predictions)
    where = f" in {result.processes} processes" if result.processes > 1 else ""
    print(f"{result.samples} samples on {result.devices} device(s){where}, batch "
          f"{result.batch_size}: "
          f"{result.seconds:.3f} s ({result.samples_per_second:.1f} samples/s; first batch "
          f"with compilation {result.first_batch_seconds:.3f} s)")
    for name, value in result.outputs.items():
        print(f"{name}: {value.dtype} {list(value.shape)}"
              + (f" -> {out_dir / (name + '.npy')}" if out_dir else ""))
    if result.metric is not None:
        print(f"{result.metric_name}: {result.metric:.4f}")
    for key, value in result.extra.items():
        if key.startswith("top"):
            print(f"{key}: {value:.4f}")
        elif key == "per_class_accuracy":
            print("per-class accuracy: " + " ".join(
                "-" if v is None else f"{v:.3f}" for v in value))
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    """Place a graph on device models, print placement and estimate, write partitions + SVG."""
    import json

    from tosa_jax import hw_models
    from tosa_jax.frontends import read_source
    from tosa_jax.hw_models.cost import vela_cycles_total

    graph = read_source(args.graph)
    policy = None
    if args.policy:
        try:
            policy = json.loads(Path(args.policy).read_text())
            # operator indices arrive as strings in JSON
            policy = {int(k) if k.isdigit() else k: v for k, v in policy.items()}
        except (OSError, ValueError, AttributeError) as e:
            raise TosaInputError(f"--policy: cannot read {args.policy}: {e}") from e
    pg = hw_models.partition(graph, args.target, policy, fallback=args.fallback)
    stem = Path(args.graph).stem
    out_dir = Path(args.out or f"{stem}_partitions")
    paths = pg.write(out_dir, stem=stem)
    vela = {}
    if args.vela:
        npu = [(p, path) for p, path in zip(pg.partitions, paths)
               if hw_models.get_device(p.device).kind == "npu"]
        t0 = time.time()
        for k, (p, path) in enumerate(npu, 1):
            # Vela takes seconds per partition: say where it is
            print(f"vela: partition {k}/{len(npu)} (#{p.index}, {len(p.op_indices)} ops) on "
                  f"{p.device} ...", end="", file=sys.stderr, flush=True)
            vela[p.index] = vela_cycles_total(path, p.device, out_dir / f"vela_{p.index}")
            got = f"{vela[p.index]:.0f} cycles" if vela[p.index] else "not compiled"
            print(f" {got}, {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    cost = hw_models.estimate(pg, vela_cycles=vela)
    print(f"{args.graph}: {pg.summary()}")
    for i, why in sorted(pg.reasons.items()):
        op = graph.main.operators[i]
        print(f"  #{i} {op.op} on {pg.placement[i]}: {'; '.join(why)}")
    for note in pg.notes:
        print(f"note: {note}")
    print()
    print(hw_models.table(cost, pg, per_op=args.per_op))
    svg_path = Path(args.svg) if args.svg else out_dir / f"{stem}.svg"
    hw_models.svg(pg, cost, svg_path)
    print(f"partitions: {', '.join(str(p) for p in paths)}; picture: {svg_path}")
    if args.json:
        Path(args.json).write_text(json.dumps(hw_models.report_dict(pg, cost), indent=1))
        print(f"report: {args.json}")
    return 0


def _qparams(specs: list[str] | None) -> dict[str, tuple[float, int]]:
    """``NAME=SCALE,ZP`` pairs."""
    out = {}
    for spec in specs or []:
        name, sep, value = spec.rpartition("=")
        try:
            scale, zp = value.split(",")
            out[name] = (float(scale), int(zp))
        except ValueError:
            raise TosaInputError(f"--scale {spec!r}: expected NAME=SCALE,ZERO_POINT") from None
        if not sep:
            raise TosaInputError(f"--scale {spec!r}: expected NAME=SCALE,ZERO_POINT")
    return out


def cmd_inspect(args: argparse.Namespace) -> int:
    """Every intermediate tensor against the reference model, another graph or a dump."""
    import json

    from tosa_jax import inspect as ti
    from tosa_jax.ir import INTEGER_TYPES
    from tosa_jax.model import load

    model = load(args.graph, device=args.device)
    inputs = _parse_inputs(model, args.inputs)
    xs = tuple(inputs[s.name] for s in model.inputs)
    t0 = time.perf_counter()
    against: object = args.against
    against_inputs = None
    if args.against.endswith(".tosa"):
        against = load(args.against, device=args.device)
        if args.against_inputs:
            got = _parse_inputs(against, args.against_inputs)
            against_inputs = tuple(got[s.name] for s in against.inputs)
    mapping = None
    if args.map:
        try:
            mapping = json.loads(Path(args.map).read_text())
        except (OSError, ValueError) as e:
            raise TosaInputError(f"--map: cannot read {args.map}: {e}") from e
    names = args.names.split(",") if args.names else None
    if args.against == "none":
        values = model.intermediates(*xs, names=names, constants=args.constants)
        result = None
    else:
        result = ti.compare(model, xs, against=against, against_inputs=against_inputs,
                            names=names, mapping=mapping, constants=args.constants,
                            scales=_qparams(args.scale))
        values = None
    seconds = time.perf_counter() - t0
    if args.dump:
        values = values if values is not None else model.intermediates(
            *xs, names=names, constants=args.constants)
        np.savez(args.dump, **values)
        print(f"{len(values)} tensors -> {args.dump}")
    if result is None:
        rows = ti.health(values, model.graph)
        print(f"{'#':>4} {'op':<18} {'tensor':<40} {'dtype':<6} {'min':>10} {'max':>10} "
              f"{'mean':>10} {'sat %':>6}")
        for h in rows[: args.rows]:
            sat = "-" if h.saturation is None else f"{100 * h.saturation:.1f}"
            print(f"{h.index:>4} {h.op:<18} {h.name[:40]:<40} {h.dtype:<6} {h.min:>10.4g} "
                  f"{h.max:>10.4g} {h.mean:>10.4g} {sat:>6}")
        if args.json:
            Path(args.json).write_text(json.dumps([vars(h) for h in rows], indent=1))
        return 0
    print(result.table(limit=args.rows))
    if len(result.rows) > args.rows:
        print(f"... {len(result.rows) - args.rows} more rows (--rows N, or --json FILE)")
    print(f"compared in {seconds:.3f} s", file=sys.stderr)
    if args.json:
        result.to_json(args.json)
        print(f"report: {args.json}")
    if args.html:
        ti.html_report(result, args.html, title=f"{args.graph} against {args.against}")
        print(f"HTML report: {args.html}")
    if args.model_explorer:
        extra = {}
        if args.target:
            from tosa_jax import hw_models

            pg = hw_models.partition(model.graph, args.target)
            cost = hw_models.estimate(pg)
            # Model Explorer colours nodes by number: the device's rank in pg.devices
            palette = ("#8c8", "#fc8", "#8cf", "#f88", "#ccc")
            extra["placement"] = {
                i: {"value": pg.devices.index(d),
                    "bgColor": palette[min(pg.devices.index(d), len(palette) - 1)]}
                for i, d in pg.placement.items()}
            extra["cycles"] = {c.index: c.cycles for p in cost.partitions for c in p.ops}
        paths = ti.write_node_data(result, args.model_explorer, extra)
        print(f"Model Explorer node data: {', '.join(paths)}")
    # against the reference model, integer tensors must be bit-exact (floats: read max |diff|)
    wrong = [r for r in result.rows if not r.exact and r.dtype in INTEGER_TYPES]
    return 1 if wrong and args.against == "reference" else 0


def _version() -> str:
    """tosa_jax's version and the JAX it runs on (from the installed metadata: no JAX import)."""
    from importlib import metadata

    from tosa_jax import __version__

    deps = []
    for dist in ("jax", "jaxlib"):
        try:
            deps.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            deps.append(f"{dist} not installed")
    return f"tosa-jax {__version__} ({', '.join(deps)})"


def cmd_convert(args: argparse.Namespace) -> int:
    """Convert between front-door formats: .tflite/.mlir/.mlirbc -> .tosa, .tosa -> .mlir."""
    from tosa_jax import frontends

    to = args.to or frontends.format_for_suffix(args.output)
    if to is None:
        raise TosaInputError(f"{args.output}: say the output format with --to tosa|mlir|mlirbc "
                             "(or name the file .tosa, .mlir or .mlirbc)")
    data = frontends.convert(args.input, to, generic=args.generic)
    Path(args.output).write_bytes(data)
    src = frontends.detect(Path(args.input).read_bytes())
    print(f"{args.input} ({frontends.FORMATS.get(src or '', 'unknown')}) -> {args.output} "
          f"({frontends.FORMATS['tosa' if to == 'tosa' else to]}, {len(data)} bytes)")
    return 0


class _VersionAction(argparse.Action):
    """``--version``, its text read when asked for: reading the installed metadata costs every
    other command 30-40 ms (importing importlib.metadata), a tenth of a cached ``run``."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the versions of tosa-jax, jax and jaxlib and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(_version())  # on stdout, as argparse's own version action
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tosa-jax", description=__doc__)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="version, inputs, outputs and operator counts of a graph")
    p.add_argument("graph")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("check", help="profiles, extensions and level a graph needs; ERROR_IFs")
    p.add_argument("graph")
    p.add_argument("--profile", nargs="+", metavar="PROFILE",
                   help="profiles offered (PRO-INT, PRO-FP) or a spec string such as "
                        "TOSA-1.0+INT+int16; default: any")
    p.add_argument("--extension", nargs="*", metavar="EXT",
                   help="extensions offered (EXT-INT16 or int16 ...); default: any")
    p.add_argument("--level", help="level to check: 8K or none; default: not checked")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("run", help="run a graph on .npy inputs")
    p.add_argument("graph")
    p.add_argument("inputs", nargs="*", metavar="[NAME=]FILE.npy",
                   help="inputs by name, or files in the graph's input order")
    p.add_argument("-o", "--output-dir", help="write each output as NAME.npy here")
    p.add_argument("-p", "--print", action="store_true", help="print output values")
    p.add_argument("--device", help="JAX platform to run on: cpu or gpu (default: JAX's)")
    p.add_argument("--check-requires", action="store_true",
                   help="also check the REQUIREs that depend on the values (int32 overflow, "
                   "indices out of range...): a warning names the operator that breaks one")
    p.add_argument("--xla-floats", action="store_true",
                   help="run a float graph on XLA's compiled code, as model(x) does in Python "
                        "(default: a small float graph runs on its numpy program, no compile; "
                        "both meet TOSA's float compliance, their last bits may differ)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("eval", help="run a batch-1 graph over a dataset of stacked samples "
                                    "(vmapped batches sharded over all devices)")
    p.add_argument("graph")
    p.add_argument("inputs", nargs="+", metavar="[NAME=]SAMPLES.npy",
                   help="samples stacked on a leading axis, per input")
    p.add_argument("--labels", help="class labels .npy ([N] integers) for the metric")
    p.add_argument("--metric", default="accuracy",
                   help="metric on the first output: accuracy or top<k> (e.g. top5)")
    p.add_argument("--axis", type=int, help="class axis of a sample's output, when it has "
                                            "more than one axis longer than 1")
    p.add_argument("-b", "--batch-size", type=int, default=256)
    p.add_argument("-o", "--output-dir", help="write each output (and predictions) as .npy")
    p.add_argument("--device", help="JAX platform to run on: cpu or gpu (default: JAX's)")
    p.add_argument("--host-devices", type=int, metavar="N",
                   help="split the CPU into N JAX devices and shard batches over them "
                        "(default: one per usable core in a single process, unless "
                        "JAX_NUM_CPU_DEVICES or XLA_FLAGS set the count)")
    p.add_argument("--coordinator", metavar="HOST:PORT",
                   help="several processes or hosts (jax.distributed): the address of process 0; "
                        "run the same command in each, with its --process-id; each runs its "
                        "share of the samples, process 0 prints and writes the results")
    p.add_argument("--num-processes", type=int, metavar="N", help="processes in all")
    p.add_argument("--process-id", type=int, metavar="I", help="this process, 0 to N-1")
    p.add_argument("--timeout", type=int, default=300, metavar="S",
                   help="seconds to wait for all processes to join (default 300)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("partition", help="place a graph on NPU/GPU/CPU device models: partitions, "
                                         "cost estimate, picture")
    p.add_argument("graph")
    p.add_argument("--target", nargs="+", required=True, metavar="DEVICE",
                   help="device(s) in order of preference, e.g. ethos-u55-128 (CPU fallback)")
    p.add_argument("--fallback", help="device for what no target runs (default: cpu)")
    p.add_argument("--policy", metavar="JSON",
                   help="file mapping operator index, location, output or type to a device")
    p.add_argument("--out", metavar="DIR",
                   help="write the partitions (.tosa) and picture here (default: STEM_partitions)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--svg", metavar="FILE", help="write the picture here (default: in --out)")
    p.add_argument("--per-op", action="store_true", help="print the per-operator table")
    p.add_argument("--vela", action="store_true",
                   help="compile NPU partitions with Vela and show its cycles beside ours")
    p.set_defaults(func=cmd_partition)
    p = sub.add_parser("cache", help="show or clear the persistent compile cache")
    p.add_argument("--clear", action="store_true", help="remove every entry")
    p.add_argument("--dir", help="the cache directory (default: TOSA_JAX_CACHE_DIR, else "
                                 "XDG_CACHE_HOME/tosa_jax, else ~/.cache/tosa_jax)")
    p.set_defaults(func=cmd_cache)
    p = sub.add_parser("inspect", help="every intermediate tensor against the reference model, "
                                       "another graph or a dump: first divergence, SQNR, "
                                       "saturation; Model Explorer node data, HTML report")
    p.add_argument("graph")
    p.add_argument("inputs", nargs="*", metavar="[NAME=]FILE.npy",
                   help="inputs by name, or files in the graph's input order")
    p.add_argument("--against", default="reference",
                   help="'reference' (the TOSA reference model, default; exit status 1 when an "
                        "integer tensor differs), another graph (.tosa), a dump of tensors "
                        "(.npz), or 'none' (health table only)")
    p.add_argument("--against-inputs", nargs="*", metavar="[NAME=]FILE.npy",
                   help="inputs of the other graph (default: the same files)")
    p.add_argument("--map", metavar="JSON", help="file mapping our tensor names to theirs")
    p.add_argument("--scale", nargs="*", metavar="NAME=SCALE,ZP",
                   help="known quantization parameters (e.g. the input's) to dequantize with")
    p.add_argument("--names", help="comma-separated tensors to keep (default: all)")
    p.add_argument("--constants", action="store_true", help="keep constants too")
    p.add_argument("--dump", metavar="FILE.npz", help="write our tensors here")
    p.add_argument("--json", metavar="FILE", help="write the full comparison as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--model-explorer", metavar="FILE",
                   help="write Model Explorer node data (max |diff|; SQNR, saturation, "
                        "mismatches beside it as FILE.<metric>.json)")
    p.add_argument("--target", nargs="+", metavar="DEVICE",
                   help="with --model-explorer: placement and cycles on these device models")
    p.add_argument("--rows", type=int, default=60, help="rows of the printed table")
    p.add_argument("--device", help="JAX platform to run on: cpu or gpu (default: JAX's)")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("convert", help="convert a model: .tflite/.mlir/.mlirbc -> .tosa, "
                                       ".tosa -> .mlir/.mlirbc")
    p.add_argument("input", help="a TOSA flatbuffer, TOSA MLIR (text or bytecode) or TFLite file")
    p.add_argument("output", help="the file to write; its suffix picks the format")
    p.add_argument("--to", choices=["tosa", "mlir", "mlirbc"], help="the output format")
    p.add_argument("--generic", action="store_true",
                   help="MLIR in the generic op form (reads across LLVM versions)")
    p.set_defaults(func=cmd_convert)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except TosaError as e:
        print(f"tosa-jax: error: {e}", file=sys.stderr)
        return 2


def entry() -> None:
    """The ``tosa-jax`` console script: ``main``, then leave without the interpreter's teardown.

    After JAX is imported, Python's exit (freeing its thousands of modules and objects) takes
    0.2-0.45 s here, longer than a cached ``tosa-jax run`` itself. Our files are written and
    closed by then and the compile cache writes each entry atomically, so the process ends at
    once, streams flushed. It does not wait for a background optimized compile (tiered
    compilation): a command runs its graph once, and waiting would double a first run's time
    (resnet_int8: 2.0 -> 4.2 s) to spare later runs little (its cached quick-tier executable
    gives the first result as fast); an unfinished entry is never renamed into the cache.
    It does wait for the cache writes under way (``cache.flush``), once its output is out:
    they are what makes the next run of the graph fast."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (tosa-jax ... | head): nothing more to say
        pass
    if "tosa_jax.cache" in sys.modules:
        sys.modules["tosa_jax.cache"].flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
