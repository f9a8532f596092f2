"""Discrete-event engine (SimPy): a flow-level network with max-min fair sharing, and collectives on it."""

from simulator.engine.flows import Flow, NetworkStats
from simulator.engine.network import FlowNetwork

__all__ = ["Flow", "FlowNetwork", "NetworkStats"]
