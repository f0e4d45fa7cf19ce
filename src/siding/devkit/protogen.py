"""Regenerate the Python code for the delivery contract (``make proto``).

Runs ``grpc_tools.protoc`` on ``proto/`` and writes ``siding/v1/*_pb2.py``, ``*_pb2_grpc.py`` and
their mypy-protobuf ``.pyi`` stubs under ``src/``. The generated code is committed; a test
regenerates it into a temporary folder and fails when it drifts from the ``.proto``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from siding.errors import SetupError

REPO_ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = REPO_ROOT / "proto"
OUT_DIR = REPO_ROOT / "src"
PROTO_FILES = ("siding/v1/consumer.proto",)
# The generated package needs an __init__; protoc does not write one.
INIT_TEXT = (
    '"""Generated code for the siding delivery contract (proto/siding/v1). Do not edit."""\n'
)


def _plugin(name: str) -> str:
    # The plugins are console scripts installed beside the interpreter (mypy-protobuf).
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SetupError(f"{name} not found beside {sys.executable}: install mypy-protobuf")
    return str(path)


def protoc_args(proto_dir: Path, out_dir: Path) -> list[str]:
    """The protoc command line (without the program name) for every contract file."""
    well_known = resources.files("grpc_tools") / "_proto"
    return [
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *(str(proto_dir / name) for name in PROTO_FILES),
    ]


def generate(proto_dir: Path = PROTO_DIR, out_dir: Path = OUT_DIR) -> list[Path]:
    """Generate into ``out_dir``; return the generated files (sorted)."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    package = out_dir / "siding" / "v1"
    package.mkdir(parents=True, exist_ok=True)
    code = protoc.main(["protoc", *protoc_args(proto_dir, out_dir)])
    if code != 0:
        raise SetupError(f"protoc failed with exit code {code}")
    (package / "__init__.py").write_text(INIT_TEXT)
    return sorted(p for p in package.iterdir() if p.is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--proto-dir", type=Path, default=PROTO_DIR)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    for path in generate(args.proto_dir, args.out):
        print(path)


if __name__ == "__main__":
    main()
