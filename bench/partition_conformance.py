"""Partitioning over the conformance suite: every sampled test graph is partitioned for a target
(what the NPU takes, the rest on the CPU), each partition goes through write/read, and the
partitioned model (each partition on its own JAX host device) must give bit-identical outputs to
the unpartitioned model. Prints a table per operator and writes JSON.

    python bench/partition_conformance.py [--root /work/conf_full/operators] [--per-op 3]
        [--target ethos-u55-128] [--host-devices 4] [--json out.json]

Conformance graphs are mostly one operator and its constants; ``--split`` (default on) places
every other operator on the CPU, so that graphs with more than one operator are cut as well.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="/work/conf_full/operators")
    ap.add_argument("--per-op", type=int, default=3, help="tests per operator (0: all)")
    ap.add_argument("--target", nargs="+", default=["ethos-u55-128"])
    ap.add_argument("--host-devices", type=int, default=4)
    ap.add_argument("--no-split", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    # JAX reads this when it starts its CPU backend: before the first import of jax.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={args.host_devices}")
    import jax
    import numpy as np

    import tosa_jax
    from tosa_jax.hw_models import partition

    ndev = len(jax.devices())
    tests: dict[str, list[Path]] = {}
    for desc in sorted(Path(args.root).glob("*/*/*/desc.json")):
        tests.setdefault(desc.parent.parent.name, []).append(desc.parent)
    results: dict[str, dict[str, int]] = {}
    failures: list[str] = []
    t0 = time.time()
    for op, dirs in sorted(tests.items()):
        row = results.setdefault(op, {"tested": 0, "identical": 0, "partitions": 0,
                                      "skipped": 0, "failed": 0})
        picked = 0
        for d in dirs:
            if args.per_op and picked >= args.per_op:
                break
            desc = json.loads((d / "desc.json").read_text())
            if desc.get("expected_failure"):
                continue
            picked += 1
            try:
                g = tosa_jax.read((d / desc["tosa_file"]).read_bytes())
                inputs = {n: np.load(d / f) for n, f in zip(desc["ifm_name"], desc["ifm_file"])}
                whole = tosa_jax.load(g).run(inputs)
            except tosa_jax.TosaError:
                row["skipped"] += 1  # not ours to judge here (the conformance run does)
                continue
            row["tested"] += 1
            try:
                flip = [False]

                def alternate(o, flip=flip):
                    flip[0] = not flip[0]
                    return None if flip[0] else "cpu"

                pg = partition(g, args.target, None if args.no_split else alternate)
                for p in pg.partitions:
                    tosa_jax.read(tosa_jax.write(p.graph))
                got = pg.model(by="partition").run(inputs)
                same = all(np.asarray(got[n]).dtype == np.asarray(whole[n]).dtype
                           and np.asarray(got[n]).tobytes() == np.asarray(whole[n]).tobytes()
                           for n in whole)
                row["partitions"] += len(pg.partitions)
                if same:
                    row["identical"] += 1
                else:
                    row["failed"] += 1
                    failures.append(f"{d.name}: outputs differ")
            except Exception as e:  # noqa: BLE001 - every failure is reported, none hidden
                row["failed"] += 1
                failures.append(f"{d.name}: {type(e).__name__}: {e}"[:300])
    print(f"{'operator':<24}{'tested':>7}{'identical':>10}{'failed':>7}{'skipped':>8}"
          f"{'partitions':>11}")
    for op, r in results.items():
        print(f"{op:<24}{r['tested']:>7}{r['identical']:>10}{r['failed']:>7}{r['skipped']:>8}"
              f"{r['partitions']:>11}")
    tested = sum(r["tested"] for r in results.values())
    same = sum(r["identical"] for r in results.values())
    print(f"total: {same}/{tested} bit-identical on {ndev} JAX devices, target "
          f"{' '.join(args.target)}, {time.time() - t0:.0f} s")
    for f in failures[:30]:
        print("FAIL", f)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "failures": failures,
                                               "devices": ndev}, indent=1))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
