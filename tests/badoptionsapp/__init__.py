"""A job with options from the environment, installed only in the worker processes of the option
tests, which show such a declaration stops the process that imports it."""
