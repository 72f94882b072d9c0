"""Generate ``profiles/spec_data.py`` from the machine-readable TOSA specification (tosa.xml).

    python profiles/generate_spec_data.py /path/to/tosa.xml [-o profiles/spec_data.py]

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
}


def _rank_bound(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else text


def _type_value(value: str) -> str | int:
    if value in SPEC_TYPES:
        return SPEC_TYPES[value]
    if value.isdigit():
        return int(value)
    raise ValueError(f"unknown type value {value!r} in typesupport")


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
                types = {k: _type_value(val) for k, val in ts.attrib.items()
                         if k not in ("mode", "version_added")}
                options = tuple(
                    tuple(n for n in (p.get("name"), p.get("and_name")) if n)
                    for p in ts.findall("op_profile"))
                typesupport.append({"mode": ts.get("mode"), "types": types, "options": options,
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
