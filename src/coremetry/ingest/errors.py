"""The ingest subsystem's exceptions.

::

    IngestError              root of everything ingest raises on purpose
    ├── MalformedInput       the input cannot be decoded at all (not JSON, not protobuf, wrong
    │                        shape): nothing of it is written; the message names what is wrong
    │                        and where (a JSON path, a line number, a protobuf message name)
    └── UnknownFormat        ``--format auto`` could not tell what a file is

Problems with *one item* (a span without a start time, a row with a corrupt timestamp) are not
exceptions: the decoders reject that item with a reason (:class:`~coremetry.ingest.Rejected`)
and keep the rest, which the OTLP receiver reports as ``partial_success`` and the importer as
its summary.
"""

from __future__ import annotations

__all__ = ["IngestError", "MalformedInput", "UnknownFormat"]


class IngestError(Exception):
    """Root of the ingest subsystem's exceptions; never raised itself."""


class MalformedInput(IngestError):
    """Raised by a decoder when its input cannot be decoded at all.

    The message is written for the sender: it names the format and what is wrong, with the
    decoder's location when there is one (msgspec's ``- at `$.resourceSpans[0]...``` form, a
    CSV line number).
    """


class UnknownFormat(IngestError):
    """Raised by :func:`~coremetry.ingest.detect_format` when the content matches no format."""
