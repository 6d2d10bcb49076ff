"""`tickui worker`: runs the commands an engine sends over Kafka (core.Worker), reports
each run on the events topic, and answers cancels and resends."""
