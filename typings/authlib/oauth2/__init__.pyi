"""Partial stubs (see authlib/__init__.pyi)."""
