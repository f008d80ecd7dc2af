#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of a binary built with `cargo auditable`,
from the dependency list the binary itself carries: its `.dep-v0` ELF
section, zlib-compressed JSON that cargo-auditable writes at link time
(every crate compiled into it, and the build-time ones: proc-macros,
build scripts' dependencies). Each crate gets its purl, its licence (from
`cargo metadata`) and the SHA-256 Cargo.lock records for it.

  scripts/sbom.py BINARY OUTPUT [--timestamp UNIX_SECONDS]

The same binary and timestamp give the same file (the serial number is
derived from the dependency list). scripts/build-image.sh runs it; the
result goes into the image and beside it (docs/install.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
import tomllib
import uuid
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECTION = ".dep-v0"


def die(msg: str) -> None:
    print(f"sbom: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def section(binary: bytes, name: str) -> bytes:
    """The contents of ELF section `name` (64-bit little-endian ELF)."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2 or binary[5] != 1:
        die("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", binary, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", binary, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name_at = struct.unpack_from("<I", binary, base)[0]
        offset, size = struct.unpack_from("<QQ", binary, base + 24)
        return name_at, offset, size

    _, strtab, _ = header(shstrndx)
    for i in range(shnum):
        name_at, offset, size = header(i)
        end = binary.index(b"\0", strtab + name_at)
        if binary[strtab + name_at : end].decode() == name:
            return binary[offset : offset + size]
    die(f"no {name} section: build the binary with `cargo auditable build`")
    raise AssertionError


def spdx(expression: str | None) -> str | None:
    """Cargo's licence field as an SPDX expression (its old `A/B` form is
    `A OR B`)."""
    if not expression:
        return None
    return " OR ".join(part.strip() for part in expression.split("/"))


def host() -> str:
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("host: "))


def licences() -> dict[tuple[str, str], str]:
    # this platform's crates only: the build fetched those, not every
    # platform's (offline)
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--offline",
         "--filter-platform", host(), "--manifest-path", str(REPO / "Cargo.toml")],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        die(f"cargo metadata: {out.stderr.strip()}")
    return {(p["name"], p["version"]): p.get("license") or "" for p in json.loads(out.stdout)["packages"]}


def checksums() -> dict[tuple[str, str], str]:
    lock = tomllib.loads((REPO / "Cargo.lock").read_text())
    return {(p["name"], p["version"]): p["checksum"] for p in lock["package"] if "checksum" in p}


def bom(audit: dict, timestamp: int) -> dict:
    packages = audit["packages"]
    lic, sums = licences(), checksums()
    refs = []
    for p in packages:
        ref = f"{p['name']}@{p['version']}"
        refs.append(ref if ref not in refs else f"{ref}#{len(refs)}")

    def component(i: int) -> dict:
        p = packages[i]
        key = (p["name"], p["version"])
        c: dict = {
            "type": "application" if p.get("root") else "library",
            "bom-ref": refs[i],
            "name": p["name"],
            "version": p["version"],
        }
        if p["source"] == "crates.io" or p.get("root"):
            c["purl"] = f"pkg:cargo/{p['name']}@{p['version']}"
        if spdx(lic.get(key)):
            c["licenses"] = [{"expression": spdx(lic[key])}]
        if key in sums:
            c["hashes"] = [{"alg": "SHA-256", "content": sums[key]}]
        # build-time only (proc-macros, build scripts' crates): not in the binary
        if p.get("kind") == "build":
            c["scope"] = "excluded"
        c["properties"] = [{"name": "cargo:source", "value": p["source"]}]
        return c

    roots = [i for i, p in enumerate(packages) if p.get("root")]
    if len(roots) != 1:
        die(f"{len(roots)} root packages in the dependency list, expected 1")
    digest = hashlib.sha256(json.dumps(audit, sort_keys=True).encode()).hexdigest()
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'sha256:' + digest)}",
        "version": 1,
        "metadata": {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp)),
            "component": component(roots[0]),
            "properties": [
                {"name": "sbom:source", "value": f"the binary's {SECTION} section, written by cargo auditable"}
            ],
        },
        "components": [component(i) for i in range(len(packages)) if i not in roots],
        "dependencies": [
            {"ref": refs[i], "dependsOn": [refs[d] for d in p.get("dependencies", [])]}
            for i, p in enumerate(packages)
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("binary")
    parser.add_argument("output")
    parser.add_argument("--timestamp", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", time.time())))
    args = parser.parse_args()
    raw = section(Path(args.binary).read_bytes(), SECTION)
    try:
        audit = json.loads(zlib.decompress(raw))
    except (zlib.error, ValueError) as e:
        die(f"{SECTION} is not zlib-compressed JSON: {e}")
    out = bom(audit, args.timestamp)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    print(f"sbom: {args.output}: {len(out['components'])} crates", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
