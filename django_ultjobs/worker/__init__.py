"""The worker: claim loop, executor threads, one heartbeat, one completer."""
