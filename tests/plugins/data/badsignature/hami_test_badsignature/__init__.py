"""Fake plugin package for the loader tests; see tests/plugins/test_manager.py."""
