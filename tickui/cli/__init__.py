"""The `tickui` command line: one module per command group."""
