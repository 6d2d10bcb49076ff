"""Pure view code: what a row, a cell or a log line shows, apart from any widget."""
