"""The worker: claim loop, executor threads, one ticker, one completer."""
