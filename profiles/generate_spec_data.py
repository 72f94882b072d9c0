"""Generate ``profiles/spec_data.py`` from the machine-readable TOSA specification (tosa.xml).

    python profiles/generate_spec_data.py /path/to/tosa.xml [-o profiles/spec_data.py]

TOSA 1.0.2 (``shared/tosa-spec/tosa.xml``) gives ``spec_data.py``; the TOSA 1.1 draft that
tosa-tools 2026.8 implements (arm/tosa-specification at commit 653c153, 2026-07-24: the last one
before CAST's ``input_unsigned``, which tosa-tools 2026.8's schema lacks, and before MX SLICE,
TILE, TRANSPOSE, which its conformance generator lacks) gives ``spec_data_1_1.py``:

    git -C <tosa-specification> show 653c153:tosa.xml > tosa-1.1.xml
    python profiles/generate_spec_data.py tosa-1.1.xml -o profiles/spec_data_1_1.py

The output is plain Python literals (profiles, extensions, levels, enumerations and, per operator,
its arguments and its allowed type combinations with the profiles/extensions that include them),
so the runtime never reads the XML. The output depends only on the XML: running the script again
on the same file writes the same bytes (``--check`` verifies the committed module is current).
"""

from __future__ import annotations

import argparse
import hashlib
import pprint
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

# Spec element types -> the IR's element type names (tosa_jax.ir.HOST_DTYPES).
SPEC_TYPES = {
    "bool_t": "BOOL", "i4_t": "INT4", "i8_t": "INT8", "i16_t": "INT16", "i32_t": "INT32",
    "i48_t": "INT48", "fp16_t": "FP16", "bf16_t": "BF16", "fp32_t": "FP32",
    "fp8e4m3_t": "FP8E4M3", "fp8e5m2_t": "FP8E5M2", "shape_t": "SHAPE",
    # TOSA 1.1 (draft)
    "i64_t": "INT64", "fp8ue8m0_t": "FP8UE8M0", "fp4e2m1_t": "FP4E2M1", "fp6e2m3_t": "FP6E2M3",
    "fp6e3m2_t": "FP6E3M2", "mxint8_t": "MXINT8",
}


def _rank_bound(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


# TOSA 1.1: the extension each data type needs where a row says DEDUCE-EXT ("Extension Data Type
# Mapping", introduction.adoc); block-scaled types need EXT-MX-COMMON too.
DEDUCED_EXTENSIONS = {
    "INT64": "EXT-INT64", "INT16": "EXT-INT16", "INT4": "EXT-INT4", "BF16": "EXT-BF16",
    "FP8E4M3": "EXT-FP8E4M3", "FP8E5M2": "EXT-FP8E5M2", "FP8UE8M0": "EXT-MX-COMMON",
    "FP4E2M1": "EXT-MX-FP4E2M1", "FP6E2M3": "EXT-MX-FP6E2M3", "FP6E3M2": "EXT-MX-FP6E3M2",
    "MXINT8": "EXT-MX-INT8",
}
# "Composite Block-Scaled Type Mapping": a block-scaled type with FP8 values needs the MX
# extension of its value type (bs32_fp8ue8m0_fp8e4m3_t: EXT-MX-COMMON and EXT-MX-FP8E4M3), not
# the plain FP8 one; the other value types' deduced extensions are already the MX ones.
COMPOSITE_EXTENSIONS = {"FP8E4M3": "EXT-MX-FP8E4M3", "FP8E5M2": "EXT-MX-FP8E5M2"}
# The values of each block-scaled set (bs32_fp8ue8m0_set_t): block_scale_t<32, fp8ue8m0_t, v>.
BLOCK_SCALED_SETS = {"bs32_fp8ue8m0_set_t": ("fp8e4m3_t", "fp8e5m2_t", "fp6e3m2_t", "fp6e2m3_t",
                                             "fp4e2m1_t", "mxint8_t")}
# A block-scaled type in a row of types: the value type, marked (the scales come separately).
BLOCK_SCALED_MARK = "BS32_FP8UE8M0_"


def _type_value(value: str) -> str | int:
    if value in SPEC_TYPES:
        return SPEC_TYPES[value]
    if value == "tensor_size_t":  # the components of a shape_t (TOSA 1.1 shape operators)
        return "SHAPE"
    if value.startswith("bs32_fp8ue8m0_") and value[len("bs32_fp8ue8m0_"):] in SPEC_TYPES:
        return BLOCK_SCALED_MARK + SPEC_TYPES[value[len("bs32_fp8ue8m0_"):]]
    if value.isdigit():
        return int(value)
    raise ValueError(f"unknown type value {value!r} in typesupport")


def _set_values(text: str) -> list[str]:
    out = []
    for v in text.split():
        if v in BLOCK_SCALED_SETS:
            out += ["bs32_fp8ue8m0_" + e for e in BLOCK_SCALED_SETS[v]]
        else:
            out.append(v)
    return out


def _deduce(types: dict[str, str | int]) -> tuple[str, ...]:
    """The extensions the concrete types of a DEDUCE-EXT row need."""
    found: list[str] = []
    for t in types.values():
        if not isinstance(t, str):
            continue
        if t.startswith(BLOCK_SCALED_MARK):
            value = t[len(BLOCK_SCALED_MARK):]
            found += ["EXT-MX-COMMON", COMPOSITE_EXTENSIONS.get(value, DEDUCED_EXTENSIONS[value])]
        elif t in DEDUCED_EXTENSIONS:
            found.append(DEDUCED_EXTENSIONS[t])
    return tuple(dict.fromkeys(found))


def _rows(ts: ET.Element) -> list[tuple[dict[str, str | int], tuple[tuple[str, ...], ...]]]:
    """The concrete rows of one typesupport element: (types, options). TOSA 1.1 rows may bind
    type variables to sets (``type_set``/``type_bind``: every combination, a variable with
    ``access_elem_type`` taking the element type of the one it names, one with ``same_as`` its
    type) and say ``DEDUCE-EXT``."""
    base = {k: val for k, val in ts.attrib.items() if k not in ("mode", "version_added")}
    sets = {s.get("name"): _set_values(s.get("values", "")) for s in ts.findall("type_set")}
    free = [(b.get("type"), sets[b.get("set")]) for b in ts.findall("type_bind")
            if not b.get("access_elem_type") and not b.get("same_as")]
    tied = [(b.get("type"), b.get("access_elem_type")) for b in ts.findall("type_bind")
            if b.get("access_elem_type")]
    # same_as="in_t": the variable takes the very type of the one it names (RESIZE's fp8 and
    # block-scaled rows: out_t is in_t), not every combination of the set
    same = [(b.get("type"), b.get("same_as")) for b in ts.findall("type_bind")
            if b.get("same_as")]
    combos: list[dict[str, str]] = [dict(base)]
    for var, values in free:
        combos = [dict(c, **{var: v}) for c in combos for v in values]
    combos = [dict(c, **{var: c[other] for var, other in same}) for c in combos]
    rows = []
    for c in combos:
        for var, other in tied:
            v = c[other]
            # access_elem_type<block_scale_t<>>() is fp32_t (type_conversion_helpers.tosac):
            # the zero point of a block-scaled operand is FP32
            c[var] = "fp32_t" if v.startswith("bs32_fp8ue8m0_") else v
        types = {k: _type_value(v) for k, v in c.items() if v != "-"}
        options = []
        for p in ts.findall("op_profile"):
            names = [n for n in (p.get("name"), p.get("and_name")) if n]
            if "DEDUCE-EXT" in names:
                names = [n for n in names if n != "DEDUCE-EXT"]
                deduced = _deduce(types)
                if not names and not deduced:
                    fp = any(isinstance(t, str) and t.startswith(("FP", "BF", BLOCK_SCALED_MARK))
                             for t in types.values())
                    names = ["PRO-FP" if fp else "PRO-INT"]
                names += list(deduced)
            options.append(tuple(names))
        rows.append((types, tuple(options)))
    return rows


def _profiles(elem: ET.Element | None) -> tuple[str, ...]:
    if elem is None:
        return ()
    return tuple(p.get("name", "") for p in elem.findall("op_profile"))


def parse(xml_path: Path) -> dict[str, Any]:
    """All the data the runtime needs from tosa.xml, as plain Python values."""
    root = ET.parse(xml_path).getroot()
    v = root.find("version")
    assert v is not None
    version = (int(v.get("major", 0)), int(v.get("minor", 0)), int(v.get("patch", 0)))
    profiles = {p.get("name"): {"description": p.get("description"), "status": p.get("status")}
                for p in root.iter("profile")}
    extensions = {
        e.get("name"): {"description": e.get("description"), "status": e.get("status"),
                        "profiles": tuple(s.text or "" for s in e.findall("profile_supported"))}
        for e in root.iter("profile_extension")}
    levels = {}
    for lv in root.iter("level"):
        levels[lv.get("name")] = {k.upper(): int(val) for k, val in lv.attrib.items()
                                  if k != "name"}
    enums = {}
    for en in root.findall("enum"):
        enums[en.get("name")] = {ev.get("name"): {"value": int(ev.get("value", 0)),
                                                  "extension": ev.get("extension")}
                                 for ev in en.findall("enumval")}
    operators = {}
    for group in root.find("operators") or []:
        for op in group.findall("operator"):
            name = (op.findtext("name") or "").strip()
            args = []
            for a in op.find("arguments") or []:
                rank = a.find("rank")
                args.append({
                    "name": a.get("name"),
                    "category": a.get("category"),
                    "type": a.get("type"),
                    "shape": a.get("shape"),
                    "element_type": SPEC_TYPES.get(a.get("tensor-element-type", ""),
                                                   a.get("tensor-element-type")),
                    "optional": a.get("optional") == "true",
                    "rank": None if rank is None else (_rank_bound(rank.get("min", "0")),
                                                       _rank_bound(rank.get("max", "0"))),
                    "ctc": _profiles(a.find("ctc")),
                    "ctc_remove": _profiles(a.find("ctc_remove")),
                    "level_limits": tuple((lim.get("value"), lim.get("limit"))
                                          for lim in a.findall("levellimit")),
                })
            typesupport = []
            for ts in op.findall("typesupport"):
                for types, options in _rows(ts):
                    typesupport.append({"mode": ts.get("mode"), "types": types,
                                        "options": options,
                                        "version_added": ts.get("version_added")})
            operators[name] = {
                "group": group.get("name"),
                "arguments": tuple(args),
                "type_names": tuple(t.get("name") for t in op.findall("types/type")),
                "typesupport": tuple(typesupport),
            }
    return {"VERSION": version, "PROFILES": profiles, "EXTENSIONS": extensions,
            "LEVELS": levels, "ENUMS": enums, "OPERATORS": operators}


def render(data: dict[str, Any], source_name: str, digest: str) -> str:
    """The module text: a header, then one assignment per table (stable order, stable format)."""
    major, minor, patch = data["VERSION"]
    lines = [
        f'"""TOSA {major}.{minor}.{patch} specification data, generated from {source_name}.',
        "",
        "Do not edit: regenerate with",
        "    python profiles/generate_spec_data.py <tosa.xml> -o profiles/spec_data.py",
        f"Source sha256: {digest}",
        '"""',
        "",
        "# ruff: noqa: E501",
        "",
    ]
    for key in ("VERSION", "PROFILES", "EXTENSIONS", "LEVELS", "ENUMS", "OPERATORS"):
        text = pprint.pformat(data[key], width=100, sort_dicts=False)
        lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", help="tosa.xml of the specification release")
    parser.add_argument("-o", "--output", default=str(here / "spec_data.py"))
    parser.add_argument("--check", action="store_true",
                        help="only check that the output file is what the XML generates")
    args = parser.parse_args(argv)
    xml_path = Path(args.xml)
    digest = hashlib.sha256(xml_path.read_bytes()).hexdigest()
    text = render(parse(xml_path), xml_path.name, digest)
    out = Path(args.output)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is not current: regenerate it from {xml_path}", file=sys.stderr)
            return 1
        print(f"{out} is current")
        return 0
    out.write_text(text)
    print(f"wrote {out} ({len(text)} bytes) from {xml_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
