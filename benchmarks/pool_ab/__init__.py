"""The executor pool against ``concurrent.futures.ThreadPoolExecutor``: see ``__main__``."""
