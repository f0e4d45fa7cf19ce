"""The image's HEALTHCHECK: GET /health on siding's control API; exit 0 when it answers 200.

The address is ``$SIDING_HEALTH_URL``, else the one the config's ``[control] listen`` names
(``$SIDING_CONFIG``, default /etc/siding/siding.toml), as ``siding ctl -c`` finds it.
"""

from __future__ import annotations

import os
import sys
import tomllib
import urllib.error
import urllib.request


def literal_url(path: str) -> str | None:
    """The /health URL from the config's literal ``[control] listen`` (stdlib only: a check
    must be quick on a busy machine); None when siding's own loader is needed (``${VAR}``,
    or no listen key)."""
    with open(path, "rb") as f:
        listen = tomllib.load(f).get("control", {}).get("listen")
    if not isinstance(listen, str) or "$" in listen or ":" not in listen:
        return None
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    return f"http://{'127.0.0.1' if host in ('', '0.0.0.0') else host}:{port}/health"


def health_url() -> str:
    url = os.environ.get("SIDING_HEALTH_URL")
    if url:
        return url
    path = os.environ.get("SIDING_CONFIG", "/etc/siding/siding.toml")
    url = literal_url(path)
    if url is not None:
        return url
    from siding.cli.args import control_url
    from siding.config import load_config

    return control_url(load_config(path)) + "/health"


def main() -> int:
    try:
        url = health_url()
    except Exception as exc:  # no config, a bad one, or no control API: said in one line
        print(f"unhealthy: cannot tell where /health is: {exc}")
        return 1
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            print(f"{url}: {response.status} {response.read(2000).decode(errors='replace')}")
            return 0
    except urllib.error.HTTPError as exc:
        print(f"{url}: {exc.code} {exc.read(2000).decode(errors='replace')}")
    except OSError as exc:
        print(f"{url}: unhealthy: {exc}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
