#!/usr/bin/env python3
"""Compile proto/*.proto into ovm_offline/criu/pb/ (Python modules and .pyi stubs).

    python proto/generate.py          # (re)write ovm_offline/criu/pb/
    python proto/generate.py --check  # exit 1 if the committed modules are stale

Needs grpcio-tools (it bundles protoc and google/protobuf/descriptor.proto).
The output depends only on the .proto files and on the protoc version, so a
regeneration with the same grpcio-tools is byte-identical.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
OUT_DIR = PROTO_DIR.parent / "ovm_offline" / "criu" / "pb"

# protoc writes `import criu_x_pb2 as ...` as if the modules were top-level;
# they live in a package, so make the imports relative.
_IMPORT = re.compile(r"^import (criu_\w+_pb2)( as \w+)?$", re.MULTILINE)

INIT = '''"""Generated protobuf modules for CRIU images; do not edit: see proto/README.md.

The .proto files are package-less, like CRIU's, so that message names (and
therefore crit's JSON) match upstream.
"""

from . import {modules}

__all__ = [{names}]
'''


def generate_into(out: Path) -> None:
    from grpc_tools import protoc  # imported late: only this script needs it

    include = resources.files("grpc_tools") / "_proto"
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"--proto_path={PROTO_DIR}",
            f"--proto_path={include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(Path(tmp).iterdir()):
            text = _IMPORT.sub(lambda m: f"from . import {m.group(1)}{m.group(2) or ''}", f.read_text())
            (out / f.name).write_text(text)
    modules = [p[: -len(".proto")] + "_pb2" for p in protos]
    (out / "__init__.py").write_text(
        INIT.format(modules=", ".join(modules), names=", ".join(f'"{m}"' for m in modules))
    )


def generated_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix in (".py", ".pyi")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed output instead of writing")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not args.check:
        for stale in args.out.glob("*_pb2.py*"):
            stale.unlink()
        generate_into(args.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate_into(Path(tmp))
        fresh, committed = generated_files(Path(tmp)), generated_files(args.out)
    if fresh == committed:
        return 0
    differ = sorted(n for n in fresh.keys() | committed.keys() if fresh.get(n) != committed.get(n))
    print("stale generated modules: " + ", ".join(differ), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
