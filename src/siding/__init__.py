"""siding: a push proxy for Apache Kafka consumers without head-of-line blocking."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("siding")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
