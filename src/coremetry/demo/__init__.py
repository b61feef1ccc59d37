"""The shipped demo: real telemetry to try Coremetry on, loaded shifted so that it ends "now".

``data/`` holds the Nezha TrainTicket day (MIT) converted to OTLP JSON by
``scripts/convert_nezha.py`` and two SmartThings Zipkin traces (Apache-2.0), with their licences
and ``manifest.json``; :mod:`~coremetry.demo.manifest` reads it.
"""

from .manifest import Manifest as Manifest
from .manifest import read_manifest as read_manifest

__all__ = ["Manifest", "read_manifest"]
