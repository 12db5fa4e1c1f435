"""Twin fidelity: measure a real engine, fit an iteration profile, replay the twin against it.

``profile``: drive a served engine through a grid of batch sizes and prompt/output lengths and
fit ``IterationProfile`` (``inframind twin profile``). ``validate``: replay the same arrivals
against the real engine and the twin and compare per-request latencies (``inframind twin
validate``). See docs/fidelity.md.
"""
