"""trainplan's bottom layer: cluster, workload and strategy models, cost models, and the engines.

This package never imports torch, the planner or the executor.
"""
