"""A plugin whose import fails with a plain ImportError (a broken install)."""

raise ImportError("cannot import name 'gone' from 'hami_test_plugins'")
