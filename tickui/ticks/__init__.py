"""The tick emitter and everything it needs: the ticker (ticker.RuntimeScheduler), its ONEX
face (onex), its slot loop (slots), its publisher (publisher) and metrics (snapshot,
metrics), its settings (config), the wire formats, the event buses, the sequence stores,
the circuit breaker, the slot arithmetic, the clock-set watch, and `tickui ticks` (tail)."""
