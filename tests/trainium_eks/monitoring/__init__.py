"""Tests of trainium_eks.monitoring, and the Prometheus tools they share (promtool, a local server)."""
