"""The image's HEALTHCHECK: GET /health on siding's control API; exit 0 when it answers 200.

The address is ``$SIDING_HEALTH_URL``, else the one the config's ``[control] listen`` names
(``$SIDING_CONFIG``, default /etc/siding/siding.toml), as ``siding ctl -c`` finds it.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def health_url() -> str:
    url = os.environ.get("SIDING_HEALTH_URL")
    if url:
        return url
    from siding.cli.args import control_url
    from siding.config import load_config

    config = load_config(os.environ.get("SIDING_CONFIG", "/etc/siding/siding.toml"))
    return control_url(config) + "/health"


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
