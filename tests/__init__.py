"""flashgnn's test suite; a package so that tests share ``tests.helpers``."""
