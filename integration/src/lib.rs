//! Integration tests live in tests/: they start real `heddle` and Prometheus processes.
