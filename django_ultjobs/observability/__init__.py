"""What the package tells the outside about its work: structured logs, OpenTelemetry traces and
metrics. Each never fails the work it observes."""
