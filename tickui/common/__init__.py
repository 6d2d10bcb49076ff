"""What every part uses: errors, redaction, time, processes, input checks, the Kafka client."""
