"""Scoring the estimator against published measurements, fitting its efficiency scales and writing the track record
that ``estimate_performance`` reads as data. The estimator never imports this package."""
