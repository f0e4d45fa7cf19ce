"""Regenerate the code for the delivery contract (``make proto``), for Python and for Go.

Runs ``grpc_tools.protoc`` on ``proto/``. Python: ``siding_consumer/v1/*_pb2.py``,
``*_pb2_grpc.py`` and their mypy-protobuf ``.pyi`` stubs in the thin SDK (``sdk/python/src``);
the proxy's ``siding.v1`` re-exports them, so one process holds one copy of the ``siding.v1``
descriptors. Go: ``sdk/go/sidingv1/*.pb.go`` with protoc-gen-go and protoc-gen-go-grpc, which
``make setup`` installs into ``.tools/go/bin``. The generated code is committed; a test
regenerates it into a temporary folder and fails when it drifts from the ``.proto``
(docs/sdks.md, "Generated code").
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from siding.errors import SetupError

REPO_ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = REPO_ROOT / "proto"
OUT_DIR = REPO_ROOT / "sdk" / "python" / "src"
GO_OUT_DIR = REPO_ROOT / "sdk" / "go"
GO_TOOLS = REPO_ROOT / ".tools" / "go" / "bin"
PROTO_FILES = ("siding/v1/consumer.proto",)
# The Python code lives in the thin SDK's package: protoc sees the contract under this virtual
# path, so the generated modules import each other as siding_consumer.v1 (the proto package,
# and so every wire name, stays siding.v1).
PYTHON_PACKAGE = "siding_consumer/v1"
GO_MODULE = "github.com/siding-dev/siding/sdk/go"
GO_PACKAGE = f"{GO_MODULE}/sidingv1;sidingv1"
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


def _go_plugin(name: str, tools: Path) -> str:
    path = tools / name
    if not path.exists():
        raise SetupError(f"{name} not found in {tools}: run `make setup`")
    return str(path)


def _well_known() -> str:
    return str(resources.files("grpc_tools") / "_proto")


def protoc_args(proto_dir: Path, out_dir: Path) -> list[str]:
    """The protoc command line (without the program name) for the Python code."""
    return [
        f"-I{PYTHON_PACKAGE}={proto_dir / 'siding' / 'v1'}",
        f"-I{_well_known()}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *(str(proto_dir / name) for name in PROTO_FILES),
    ]


def go_protoc_args(proto_dir: Path, out_dir: Path, tools: Path = GO_TOOLS) -> list[str]:
    """The protoc command line for the Go code (the .proto names no go_package: M options do)."""
    mappings = [f"M{name}={GO_PACKAGE}" for name in PROTO_FILES]
    return [
        f"-I{proto_dir}",
        f"-I{_well_known()}",
        f"--plugin=protoc-gen-go={_go_plugin('protoc-gen-go', tools)}",
        f"--plugin=protoc-gen-go-grpc={_go_plugin('protoc-gen-go-grpc', tools)}",
        f"--go_out={out_dir}",
        f"--go-grpc_out={out_dir}",
        f"--go_opt=module={GO_MODULE}",
        f"--go-grpc_opt=module={GO_MODULE}",
        *(f"--go_opt={m}" for m in mappings),
        *(f"--go-grpc_opt={m}" for m in mappings),
        *(str(proto_dir / name) for name in PROTO_FILES),
    ]


def _protoc(args: list[str]) -> None:
    from grpc_tools import protoc  # type: ignore[import-untyped]

    code = protoc.main(["protoc", *args])
    if code != 0:
        raise SetupError(f"protoc failed with exit code {code}")


def generate(proto_dir: Path = PROTO_DIR, out_dir: Path = OUT_DIR) -> list[Path]:
    """Generate the Python code into ``out_dir``; return the generated files (sorted)."""
    package = out_dir / PYTHON_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    _protoc(protoc_args(proto_dir, out_dir))
    (package / "__init__.py").write_text(INIT_TEXT)
    return sorted(p for p in package.iterdir() if p.is_file())


def generate_go(
    proto_dir: Path = PROTO_DIR, out_dir: Path = GO_OUT_DIR, tools: Path = GO_TOOLS
) -> list[Path]:
    """Generate the Go code into ``out_dir`` (the Go module's root); return the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _protoc(go_protoc_args(proto_dir, out_dir, tools))
    return sorted(p for p in (out_dir / "sidingv1").iterdir() if p.name.endswith(".pb.go"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--proto-dir", type=Path, default=PROTO_DIR)
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="Python output folder")
    parser.add_argument("--go-out", type=Path, default=GO_OUT_DIR, help="Go module folder")
    parser.add_argument("--lang", choices=("python", "go", "all"), default="all")
    args = parser.parse_args(argv)
    paths: list[Path] = []
    if args.lang in ("python", "all"):
        paths += generate(args.proto_dir, args.out)
    if args.lang in ("go", "all"):
        paths += generate_go(args.proto_dir, args.go_out)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
