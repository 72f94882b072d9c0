"""Reports of a partitioned graph and its cost: a printed table, a JSON-ready dict and an SVG
picture (written by hand: no plotting dependency)."""

from __future__ import annotations

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
            for c in pc.ops:
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
    for name, d in cost.per_device.items():
        lines.append(f"{name:<14} {int(d['partitions'])} partition(s), {int(d['ops'])} ops, "
                     f"{int(d['macs'])} MACs, {d['cycles']:.0f} cycles, {_us(d['time_s'])} us")
    lines.append(f"network: {len(cost.partitions)} partition(s), {len(cost.transfers)} "
                 f"transfer(s), {cost.macs} MACs, {_us(cost.time_s)} us, peak activations "
                 f"{_kib(cost.peak_bytes)} KiB, weights {_kib(cost.weight_bytes)} KiB")
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


def svg(pg: Any, cost: NetworkCost | None = None, path: str | os.PathLike | None = None) -> str:
    """The partitioned graph as an SVG: one box per operator in schedule order (top to bottom),
    filled with its device's colour, partitions as labelled bands, data edges as arcs on the
    right (tensors that cross devices drawn thick and red). Written to ``path`` if given."""
    block = pg.graph.main
    colours = _colours(pg)
    costs = {c.index: c for pc in (cost.partitions if cost else []) for c in pc.ops}
    rows: list[tuple[int, int]] = []  # (partition, op index), constants left out
    for p in pg.partitions:
        for i in p.op_indices:
            rows.append((p.index, i))
    row_h, box_w, left, top, gap = 26, 330, 150, 60, 10
    y_of: dict[int, float] = {}
    y = top
    bands = []
    for p in pg.partitions:
        y0 = y
        for i in p.op_indices:
            y_of[i] = y + row_h / 2
            y += row_h
        bands.append((p, y0, y))
        y += gap
    producer = {o: i for i in y_of for o in block.operators[i].outputs}
    part_of = {i: k for k, i in rows}
    edges = []
    for i in y_of:
        for n in block.operators[i].inputs:
            src = producer.get(n)
            if src is not None and src != i:
                crossing = pg.partitions[part_of[src]].device != pg.partitions[part_of[i]].device
                edges.append((src, i, crossing))
    span = max((abs(y_of[b] - y_of[a]) for a, b, _ in edges), default=0)
    width = left + box_w + 40 + min(400, span / 4 + 40) + 220
    height = y + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>']
    title = f"{', '.join(pg.target)}: {len(pg.partitions)} partition(s)"
    if cost is not None:
        title += f", {cost.time_s * 1e6:.1f} us estimated"
    out.append(f'<text x="10" y="22" font-size="15" font-weight="bold">{escape(title)}</text>')
    lx = 10
    for name, col in colours.items():
        out.append(f'<rect x="{lx}" y="32" width="14" height="14" fill="{col}"/>'
                   f'<text x="{lx + 18}" y="44">{escape(name)}</text>')
        lx += 30 + 7 * len(name)
    for p, y0, y1 in bands:
        col = colours[p.device]
        label = f"#{p.index} {p.device}"
        if cost is not None:
            label2 = f"{cost.partitions[p.index].cycles:.0f} cycles"
        else:
            label2 = f"{len(p.op_indices)} ops"
        out.append(f'<rect x="6" y="{y0 - 3}" width="{left + box_w - 2}" '
                   f'height="{y1 - y0 + 6}" rx="6" fill="{col}" fill-opacity="0.12" '
                   f'stroke="{col}"/>')
        out.append(f'<text x="12" y="{y0 + 14}" font-weight="bold">{escape(label)}</text>'
                   f'<text x="12" y="{y0 + 28}">{escape(label2)}</text>')
    x_right = left + box_w
    for a, b, crossing in edges:
        ya, yb = y_of[a], y_of[b]
        bend = x_right + 12 + min(400, abs(yb - ya) / 4)
        style = 'stroke="#d32f2f" stroke-width="2.5"' if crossing else \
            'stroke="#777" stroke-width="1"'
        out.append(f'<path d="M{x_right},{ya} C{bend},{ya} {bend},{yb} {x_right},{yb}" '
                   f'fill="none" {style}/>')
    for k, i in rows:
        op = block.operators[i]
        dev = pg.partitions[k].device
        c = costs.get(i)
        fused = c is not None and c.fused_into is not None
        yy = y_of[i] - row_h / 2 + 3
        dash = ' stroke-dasharray="3,2"' if fused else ""
        tip = f"#{i} {op.op} -> {', '.join(op.outputs)} on {dev}"
        if c is not None and c.fused_into:
            tip += f" ({c.fused_into})"
        out.append(f'<rect x="{left}" y="{yy}" width="{box_w}" height="{row_h - 6}" rx="3" '
                   f'fill="{colours[dev]}" fill-opacity="{0.35 if fused else 0.9}" '
                   f'stroke="#333"{dash}><title>{escape(tip)}</title></rect>')
        t = block.tensors[op.outputs[0]] if op.outputs else None
        text = f"{op.op}" + (f"  {t.dtype}{list(t.shape)}" if t is not None else "")
        if c is not None and not fused:
            text += f"  {c.cycles:.0f} cyc"
        out.append(f'<text x="{left + 5}" y="{yy + 14}">{escape(text[:58])}</text>')
    out.append("</svg>")
    text = "\n".join(out)
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text
