"""Benchmarks: numbers and ratios measured in one run on one machine, written under results/."""
