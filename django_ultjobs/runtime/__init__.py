"""What a job's body sees while it runs: its context, cancellation, durable steps and events,
and its progress."""
