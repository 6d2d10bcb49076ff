"""When a task fires: cron and interval schedules, pure functions of time."""
