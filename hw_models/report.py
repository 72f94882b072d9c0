"""Reports of a partitioned graph and its cost: a printed table, a JSON-ready dict and an SVG
picture (written by hand: no plotting dependency)."""

from __future__ import annotations

import math
import os
from html import escape
from typing import Any

from tosa_jax.hw_models.cost import NetworkCost, OpCost

# Colours by device kind, then by device name within a kind (first used, first served).
_PALETTE = {
    "npu": ["#4caf50", "#8bc34a", "#009688"],
    "gpu": ["#ff9800", "#ffc107", "#ff5722"],
    "cpu": ["#2196f3", "#03a9f4", "#3f51b5"],
}


OPS_NOTE = ("ops: operators that run (CONST, CONST_SHAPE and operators of constants only are "
            "folded and not counted); fused ones (run in another's output stage) are counted")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def _kib(n: float) -> str:
    return f"{n / 1024:.1f}"


def table(cost: NetworkCost, pg: Any = None, per_op: bool = True) -> str:
    """A table a person can read: per operator (optional), per partition, transfers, network.
    Vela's cycles appear beside ours where ``PartitionCost.vela_cycles`` is set."""
    lines: list[str] = []
    block = pg.graph.main if pg is not None else None
    if per_op:
        lines.append(f"{'op#':>5} {'operator':<18} {'output':<28} {'shape':<22} {'device':<14} "
                     f"{'part':>4} {'MACs':>10} {'cycles':>10} {'time us':>9}  note")
        for pc in cost.partitions:
            placed = set(pg.partitions[pc.index].op_indices) if pg is not None else None
            for c in pc.ops:
                if placed is not None and c.index not in placed:
                    continue  # a constant computation copied here: folded, not counted
                shape = ""
                if block is not None and c.output in block.tensors:
                    t = block.tensors[c.output]
                    shape = f"{t.dtype}{list(t.shape)}".replace(" ", "")
                note = c.fused_into or ""
                lines.append(f"{c.index:>5} {c.op:<18} {c.output[-28:]:<28} {shape[:22]:<22} "
                             f"{c.device:<14} "
                             f"{c.partition:>4} {c.macs:>10} {c.cycles:>10.0f} "
                             f"{_us(c.time_s):>9}  {note}")
        lines.append("")
    vela = any(pc.vela_cycles for pc in cost.partitions)
    head = (f"{'part':>4} {'device':<14} {'ops':>5} {'MACs':>10} {'cycles':>10} {'time us':>9} "
            f"{'peak KiB':>9} {'weights KiB':>11}")
    if vela:
        head += f" {'Vela cycles':>11} {'ours/Vela':>9}"
    lines.append(head)
    for pc in cost.partitions:
        row = (f"{pc.index:>4} {pc.device:<14} {pc.op_count:>5} {pc.macs:>10} {pc.cycles:>10.0f} "
               f"{_us(pc.time_s):>9} {_kib(pc.peak_bytes):>9} {_kib(pc.weight_bytes):>11}")
        if vela:
            if pc.vela_cycles:
                row += f" {pc.vela_cycles:>11.0f} {pc.cycles / pc.vela_cycles:>9.2f}"
            else:
                row += f" {'-':>11} {'-':>9}"
        lines.append(row)
    if cost.transfers:
        lines.append("")
        lines.append(f"{'transfer':<40} {'from':>4} -> {'to':<4} {'bytes':>9} {'time us':>9}")
        for t in cost.transfers:
            lines.append(f"{t.tensor[:40]:<40} {t.source:>4} -> {t.dest:<4} {t.nbytes:>9} "
                         f"{_us(t.time_s):>9}   {t.source_device} -> {t.dest_device}")
    lines.append("")
    from tosa_jax.hw_models.devices import get_device

    for name, d in cost.per_device.items():
        basis = ("Vela-structured model" if get_device(name).kind == "npu"
                 else "assumed rates, no oracle")
        lines.append(f"{name:<14} {int(d['partitions'])} partition(s), {int(d['ops'])} ops "
                     f"({int(d.get('fused', 0))} fused), {int(d['macs'])} MACs, "
                     f"{d['cycles']:.0f} cycles, {_us(d['time_s'])} us  [{basis}]")
    lines.append(f"network: {cost.op_count} ops, {len(cost.partitions)} partition(s), "
                 f"{len(cost.transfers)} "
                 f"transfer(s), {cost.macs} MACs, {_us(cost.time_s)} us, peak activations "
                 f"{_kib(cost.peak_bytes)} KiB, weights {_kib(cost.weight_bytes)} KiB")
    lines.append(OPS_NOTE)
    return "\n".join(lines)


def _op_dict(c: OpCost) -> dict[str, Any]:
    return {"index": c.index, "op": c.op, "output": c.output, "device": c.device,
            "partition": c.partition, "class": c.op_class, "macs": c.macs,
            "compute_cycles": round(c.compute_cycles, 1),
            "memory_cycles": round(c.memory_cycles, 1), "cycles": round(c.cycles, 1),
            "time_s": c.time_s, "activation_bytes": c.activation_bytes,
            "weight_bytes": c.weight_bytes, "fused_into": c.fused_into}


def report_dict(pg: Any, cost: NetworkCost) -> dict[str, Any]:
    """Everything in the table, and the placement, as plain JSON-ready data."""
    block = pg.graph.main
    placement = []
    for i in pg.order:
        op = block.operators[i]
        entry: dict[str, Any] = {"index": i, "op": op.op, "outputs": list(op.outputs),
                                 "device": pg.placement[i]}
        if op.location:
            entry["location"] = op.location
        if i in pg.reasons:
            entry["not_on_preferred_because"] = pg.reasons[i]
        placement.append(entry)
    parts = []
    for p, pc in zip(pg.partitions, cost.partitions):
        parts.append({
            "index": p.index, "device": p.device, "operators": p.op_indices,
            "inputs": p.inputs, "outputs": p.outputs, "macs": pc.macs,
            "cycles": round(pc.cycles, 1), "time_s": pc.time_s, "peak_bytes": pc.peak_bytes,
            "weight_bytes": pc.weight_bytes, "vela_cycles": pc.vela_cycles,
            "ops": [_op_dict(c) for c in pc.ops]})
    return {
        "target": list(pg.target), "fallback": pg.fallback, "kept_whole": pg.whole,
        "notes": list(pg.notes), "placement": placement, "partitions": parts,
        "transfers": [{"tensor": t.tensor, "source": t.source, "dest": t.dest,
                       "source_device": t.source_device, "dest_device": t.dest_device,
                       "bytes": t.nbytes, "time_s": t.time_s} for t in cost.transfers],
        "network": {"time_s": cost.time_s, "macs": cost.macs, "peak_bytes": cost.peak_bytes,
                    "weight_bytes": cost.weight_bytes, "per_device": cost.per_device},
    }


def _colours(pg: Any) -> dict[str, str]:
    from tosa_jax.hw_models.devices import get_device

    used: dict[str, int] = {}
    out = {}
    for name in pg.devices:
        kind = get_device(name).kind
        pal = _PALETTE.get(kind, _PALETTE["cpu"])
        out[name] = pal[used.get(kind, 0) % len(pal)]
        used[kind] = used.get(kind, 0) + 1
    return out


def layers(pg: Any) -> dict[int, int]:
    """Layer of every placed operator: the longest chain of placed operators before it (graph
    inputs and constants are layer -1), so an operator's inputs are all in earlier layers."""
    block = pg.graph.main
    placed = {i for p in pg.partitions for i in p.op_indices}
    producer = {o: i for i in placed for o in block.operators[i].outputs}
    layer: dict[int, int] = {}
    for i in pg.order:  # a topological order
        deps = [layer[producer[n]] for n in block.operators[i].inputs
                if n in producer and producer[n] != i and producer[n] in layer]
        layer[i] = 1 + max(deps, default=-1)
    return layer


# SVG geometry: operator boxes, the gap between lanes of a layer and between columns
_BOX_W, _BOX_H, _ROW, _LANE, _COL_GAP, _ROWS_PER_COLUMN = 172, 30, 40, 180, 70, 30


def svg(pg: Any, cost: NetworkCost | None = None, path: str | os.PathLike | None = None,
        rows_per_column: int | None = None) -> str:
    """The partitioned graph as an SVG, laid out in layers: an operator's layer is the longest
    chain of operators before it; layers run top to bottom, the operators of a layer side by
    side, and after ``rows_per_column`` layers a new column starts to the right (so a
    600-operator network is a few screens wide, not 20,000 px tall).

    Each box: ``#index OPERATOR``, output type and shape, partition and cycles, filled with its
    device's colour (dashed and pale: fused, costs nothing of its own); hover for tensor names.
    Edges: grey for data on one device, thick red with the tensor's bytes for a transfer
    between devices. The header has a legend and per-device totals (partitions, operators as
    counted everywhere, see OPS_NOTE, MACs, cycles, time). Written to ``path`` if given."""
    from tosa_jax.hw_models.cost import count_ops

    block = pg.graph.main
    colours = _colours(pg)
    costs = {c.index: c for pc in (cost.partitions if cost else []) for c in pc.ops}
    part_of = {i: p.index for p in pg.partitions for i in p.op_indices}
    layer = layers(pg)
    by_layer: dict[int, list[int]] = {}
    for i in pg.order:
        if i in part_of:
            by_layer.setdefault(layer[i], []).append(i)
    n_layers = max(by_layer, default=-1) + 1
    if rows_per_column is None:  # roughly a landscape screen shape, at least 30 layers high
        rows_per_column = max(_ROWS_PER_COLUMN, math.ceil(math.sqrt(8 * n_layers)))
    rows_per_column = max(1, rows_per_column)
    # columns of consecutive layers; a column is as wide as its widest layer
    widths: list[int] = []
    for k in range(n_layers):
        col = k // rows_per_column
        if col == len(widths):
            widths.append(1)
        widths[col] = max(widths[col], len(by_layer.get(k, [])))
    devices = list(colours)
    top = 82 + 18 * (len(devices) + 2)
    x0s, x = [], 10.0
    for w in widths:
        x0s.append(x)
        x += w * _LANE + _COL_GAP
    pos: dict[int, tuple[float, float]] = {}  # box top-left
    for k, ops in by_layer.items():
        col, row = divmod(k, rows_per_column)
        for lane, i in enumerate(ops):
            pos[i] = (x0s[col] + lane * _LANE, top + row * _ROW)
    width = max(x, 1000.0)
    height = top + min(n_layers, rows_per_column) * _ROW + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="sans-serif" font-size="10">',
           '<rect width="100%" height="100%" fill="white"/>',
           '<defs><marker id="arr" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" '
           'markerHeight="5" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#999"/></marker>'
           '<marker id="arrT" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="4" '
           'markerHeight="4" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#d32f2f"/>'
           '</marker></defs>']
    title = (f"{', '.join(pg.target)}: {count_ops(pg)} operators, {len(pg.partitions)} "
             f"partition(s), {len(pg.transfers)} transfer(s)")
    if cost is not None:
        title += f", {cost.time_s * 1e6:.1f} us estimated"
    out.append(f'<text x="10" y="22" font-size="15" font-weight="bold">{escape(title)}</text>')
    # legend: marks, then one line per device with its totals
    out.append('<rect x="10" y="32" width="26" height="13" rx="2" fill="#bbb" stroke="#333"/>'
               '<text x="42" y="43">operator (own cost)</text>'
               '<rect x="170" y="32" width="26" height="13" rx="2" fill="#bbb" '
               'fill-opacity="0.35" stroke="#333" stroke-dasharray="3,2"/>'
               '<text x="202" y="43">fused or a view: no cost of its own</text>'
               '<line x1="400" y1="39" x2="430" y2="39" stroke="#999" '
               'marker-end="url(#arr)"/><text x="436" y="43">data, same device</text>'
               '<line x1="550" y1="39" x2="580" y2="39" stroke="#d32f2f" stroke-width="2.5" '
               'marker-end="url(#arrT)"/><text x="586" y="43">transfer between devices '
               '(bytes)</text>')
    out.append('<text x="10" y="58" font-style="italic">Box: #index OPERATOR / output '
               'type[shape] / p=partition, cycles (hover: tensor names). Layers run top to '
               'bottom, then on in the next column.</text>'
               f'<text x="10" y="70" font-style="italic">{escape(OPS_NOTE)}.</text>')
    per_dev = cost.per_device if cost is not None else {}
    for j, name in enumerate(devices):
        yy = 78 + 18 * j
        d = per_dev.get(name)
        n_parts = sum(p.device == name for p in pg.partitions)
        n_ops = sum(len(p.op_indices) for p in pg.partitions if p.device == name)
        text = f"{name}: {n_parts} partition(s), {n_ops} ops"
        if d is not None:
            text += (f" ({int(d.get('fused', 0))} fused), {int(d['macs']):,} MACs, "
                     f"{d['cycles']:,.0f} cycles, {_us(d['time_s'])} us")
        out.append(f'<rect x="10" y="{yy}" width="14" height="14" fill="{colours[name]}"/>'
                   f'<text x="30" y="{yy + 11}">{escape(text)}</text>')
    if pg.transfers:
        yy = 78 + 18 * len(devices)
        moved = sum(t.nbytes for t in pg.transfers)
        out.append(f'<text x="30" y="{yy + 11}">transfers: {len(pg.transfers)}, '
                   f'{_kib(moved)} KiB moved between devices</text>')
    # column separators and labels
    for col, x0 in enumerate(x0s):
        first = col * rows_per_column
        out.append(f'<text x="{x0}" y="{top - 8}" fill="#666">layers {first}..'
                   f'{min(n_layers, first + rows_per_column) - 1}</text>')
    # edges first (boxes drawn over them)
    producer = {o: i for i in pos for o in block.operators[i].outputs}
    crossing = {(t.tensor, t.dest): t for t in pg.transfers}
    labels = []
    labelled: set[tuple[str, int]] = set()
    for i in pos:
        for n in dict.fromkeys(block.operators[i].inputs):
            src = producer.get(n)
            if src is None or src == i:
                continue
            (xa, ya), (xb, yb) = pos[src], pos[i]
            xa, ya = xa + _BOX_W / 2, ya + _BOX_H
            xb, yb = xb + _BOX_W / 2, yb
            t = crossing.get((n, part_of[i])) if part_of[src] != part_of[i] else None
            if yb <= ya:  # across columns: leave at the bottom, arrive from above
                curve = f"M{xa},{ya} C{xa},{ya + 30} {xb},{yb - 30} {xb},{yb}"
            else:
                curve = f"M{xa},{ya} C{xa},{(ya + yb) / 2} {xb},{(ya + yb) / 2} {xb},{yb}"
            if t is not None:
                out.append(f'<path d="{curve}" fill="none" stroke="#d32f2f" stroke-width="2.5" '
                           f'marker-end="url(#arrT)"><title>{escape(n)}: {t.nbytes} bytes, '
                           f'{escape(t.source_device)} -> {escape(t.dest_device)}</title>'
                           '</path>')
                if (n, part_of[i]) not in labelled:  # the tensor moves once: one label
                    labelled.add((n, part_of[i]))
                    labels.append((xb + 4, yb - 6, f"{_bytes_text(t.nbytes)}"))
            else:
                out.append(f'<path d="{curve}" fill="none" stroke="#999" stroke-width="0.8" '
                           f'stroke-opacity="0.7" marker-end="url(#arr)"/>')
    for i, (bx, by) in pos.items():
        op = block.operators[i]
        k = part_of[i]
        dev = pg.partitions[k].device
        c = costs.get(i)
        fused = c is not None and c.fused_into is not None
        tip = f"#{i} {op.op} on {dev} (partition {k})\nin: {', '.join(op.inputs)}\n" \
              f"out: {', '.join(op.outputs)}"
        if op.location:
            tip += f"\nat {op.location}"
        if fused:
            tip += f"\n({c.fused_into})"
        dash = ' stroke-dasharray="3,2"' if fused else ""
        out.append(f'<g><title>{escape(tip)}</title>'
                   f'<rect x="{bx}" y="{by}" width="{_BOX_W}" height="{_BOX_H}" rx="3" '
                   f'fill="{colours[dev]}" fill-opacity="{0.3 if fused else 0.85}" '
                   f'stroke="#333"{dash}/>')
        t = block.tensors[op.outputs[0]] if op.outputs else None
        line2 = f"{t.dtype}{list(t.shape)}".replace(" ", "") if t is not None else ""
        line3 = f"p{k}"
        if c is not None:
            line3 += "  fused" if fused else f"  {c.cycles:,.0f} cyc"
        out.append(f'<text x="{bx + 4}" y="{by + 10}" font-weight="bold">'
                   f'{escape(f"#{i} {op.op}"[:30])}</text>'
                   f'<text x="{bx + 4}" y="{by + 19}" font-size="8">{escape(line2[:36])}</text>'
                   f'<text x="{bx + 4}" y="{by + 28}" font-size="8">{escape(line3)}</text></g>')
    for lx, ly, text in labels:
        out.append(f'<text x="{lx}" y="{ly}" font-size="9" fill="#d32f2f" '
                   f'font-weight="bold">{escape(text)}</text>')
    out.append("</svg>")
    text = "\n".join(out)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def _bytes_text(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"
