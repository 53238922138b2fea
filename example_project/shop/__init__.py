"""The example's shop: orders, and the jobs that follow a checkout."""
