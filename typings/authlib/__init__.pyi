"""Partial stubs of Authlib (untyped upstream): only what coremetry.auth.oauth_server uses."""
