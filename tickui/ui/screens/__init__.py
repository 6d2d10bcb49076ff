"""The dashboard's screens: each owns its bindings and composes its widgets."""
