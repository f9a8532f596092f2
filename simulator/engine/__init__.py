"""Discrete-event engine (SimPy): a flow-level network with max-min fair sharing, and collectives on it."""

from simulator.engine.network import Flow, FlowNetwork, NetworkStats

__all__ = ["Flow", "FlowNetwork", "NetworkStats"]
