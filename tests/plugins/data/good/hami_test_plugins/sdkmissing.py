"""A plugin whose vendor SDK is not installed."""

import acme_vendor_sdk_not_installed  # noqa: F401
