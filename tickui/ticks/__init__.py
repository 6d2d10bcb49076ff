"""The tick emitter and everything it needs: the ticker (ticker.RuntimeScheduler, ONEX's
`RuntimeScheduler` face), its settings (config), the wire formats, the event buses, the
sequence stores, the circuit breaker, the metrics, the slot arithmetic, the clock-set watch,
and `tickui ticks` (tail)."""
