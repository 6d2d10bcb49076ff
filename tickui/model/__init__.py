"""Pure records and decisions: occurrences, task specs, planning, retries, backfill. No I/O."""
