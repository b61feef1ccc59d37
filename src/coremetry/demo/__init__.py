"""The shipped demo: real telemetry to try Coremetry on, loaded shifted so that it ends "now".

``data/`` holds the Nezha TrainTicket day (MIT) converted to OTLP JSON by
``scripts/convert_nezha.py`` and two SmartThings Zipkin traces (Apache-2.0), with their licences
and ``manifest.json``; :mod:`~coremetry.demo.manifest` reads it, :mod:`~coremetry.demo.loader`
loads it into a store (``coremetry demo load``, ``coremetry serve --demo``).
"""

from .loader import DatasetLoad as DatasetLoad
from .loader import DemoAlreadyLoaded as DemoAlreadyLoaded
from .loader import DemoDataBroken as DemoDataBroken
from .loader import DemoError as DemoError
from .loader import DemoState as DemoState
from .loader import LoadResult as LoadResult
from .loader import demo_state as demo_state
from .loader import load_demo as load_demo
from .manifest import Manifest as Manifest
from .manifest import read_manifest as read_manifest

__all__ = [
    "DatasetLoad",
    "DemoAlreadyLoaded",
    "DemoDataBroken",
    "DemoError",
    "DemoState",
    "LoadResult",
    "Manifest",
    "demo_state",
    "load_demo",
    "read_manifest",
]
