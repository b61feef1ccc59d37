"""Tests of :mod:`coremetry.auth`."""
