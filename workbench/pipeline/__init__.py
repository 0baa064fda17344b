"""The multi-agent reuse scenario (BCR §2–§4, KVComm): pipelines of agents over a shared task,
placeholders reused across prefixes, KVComm's anchors and gate, reuse methods as a registry."""

from workbench.pipeline import bcr, cadence_grad  # noqa: F401 - register bcr, bcr-coin, cadence-grad and its coin
from workbench.pipeline.anchors import AnchorPool, GateDecision
from workbench.pipeline.calls import agent_layout, base_cache, dense_call, kvcomm_call
from workbench.pipeline.methods import METHODS, get_method, register_method
from workbench.pipeline.request import RequestResult, run_request
from workbench.pipeline.spec import Agent, PipelineSpec

__all__ = ["METHODS", "Agent", "AnchorPool", "GateDecision", "PipelineSpec", "RequestResult", "agent_layout",
           "base_cache", "dense_call", "get_method", "kvcomm_call", "register_method", "run_request"]
