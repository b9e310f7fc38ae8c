"""Runtime services every process uses: configuration, errors, metrics, guards, helpers.

The configuration tree (TOML, then environment), the one exception root, Prometheus
metrics, the listeners' guard, backoff, child processes, the crash guard, files written
whole, logging filters and malloc tuning.

May import: the standard library and third-party libraries only; it is the bottom layer.
"""
