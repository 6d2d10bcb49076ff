"""Settings, and the one place that assembles store, engine, ticker and hooks."""
