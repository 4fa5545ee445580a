"""A plugin that raises something other than ImportError at import."""

raise RuntimeError("driver probe exploded at import time")
