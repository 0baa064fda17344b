"""A multi-agent pipeline: agents with their own system prompts on a DAG over one shared task.

Agent i's prompt is its private system prompt S_i, then the shared task T, then the outputs of
its predecessors in topological order, then its own instruction. The task and every output
are *placeholders*: segments the same text fills in several agents' prompts, each time under
another prefix (BCR §2, KVComm). The last agent in topological order answers the request.

    spec = PipelineSpec.chain(3)             # or fully_connected(n), or agents + edges by hand
    spec.order                               # (0, 1, 2): topological order, checked once
    spec.predecessors(2)                     # (0, 1)

Every check runs before any model work: no agents, an empty prompt, an edge to an unknown
agent, a self-loop or a cycle are refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class Agent:
    """One agent: its role (a short name), its private system prompt and its instruction."""

    role: str
    system: str
    instruction: str


# Roles for generated pipelines over fact questions, in the order agents are added.
ROLES: tuple[Agent, ...] = (
    Agent("reader", "You are the Reader. You pick out the facts that matter for the task.",
          "List the facts needed to answer the task, in one short sentence."),
    Agent("reasoner", "You are the Reasoner. You connect facts step by step.",
          "Connect the facts to answer the task, in one short sentence."),
    Agent("checker", "You are the Checker. You verify what the others said against the task.",
          "Say which answer the facts support, in one short sentence."),
    Agent("summarizer", "You are the Summarizer. You condense the discussion so far.",
          "Summarize the discussion in one short sentence."),
    Agent("answerer", "You are the Answerer. You give the final answer only.",
          "Give the final answer as a short phrase only."),
)


@dataclass(frozen=True)
class PipelineSpec:
    """Agents and directed edges (predecessor, successor); checked on construction."""

    agents: tuple[Agent, ...]
    edges: tuple[tuple[int, int], ...]
    order: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        object.__setattr__(self, "edges", tuple((int(a), int(b)) for a, b in self.edges))
        if not self.agents:
            raise WorkbenchError("a pipeline needs at least one agent")
        for i, agent in enumerate(self.agents):
            for name in ("role", "system", "instruction"):
                if not isinstance(getattr(agent, name), str) or not getattr(agent, name).strip():
                    raise WorkbenchError(f"agent {i}: its {name} is empty")
        n = len(self.agents)
        for a, b in self.edges:
            if not (0 <= a < n and 0 <= b < n):
                raise WorkbenchError(f"edge ({a}, {b}) names an agent outside 0..{n - 1}")
            if a == b:
                raise WorkbenchError(f"edge ({a}, {b}) is a self-loop: an agent cannot read its own output")
        object.__setattr__(self, "order", _topological(n, self.edges))

    @property
    def n_agents(self) -> int:
        return len(self.agents)

    @property
    def final(self) -> int:
        """The agent that answers the request: the last in topological order."""
        return self.order[-1]

    def predecessors(self, agent: int) -> tuple[int, ...]:
        """Agents whose outputs `agent` reads, in topological order."""
        before = {a for a, b in self.edges if b == agent}
        return tuple(i for i in self.order if i in before)

    def depth(self, agent: int) -> int:
        """Longest path from an entry agent to `agent` (entries have depth 0)."""
        parents = self.predecessors(agent)
        return 0 if not parents else 1 + max(self.depth(p) for p in parents)

    def to_dict(self) -> dict:
        return {"agents": [vars(a) for a in self.agents], "edges": [list(e) for e in self.edges]}

    @classmethod
    def fully_connected(cls, n_agents: int) -> PipelineSpec:
        """BCR's setting: agent j reads every earlier agent's output; the last role answers."""
        agents = _roles(n_agents)
        return cls(agents, tuple((a, b) for b in range(n_agents) for a in range(b)))

    @classmethod
    def chain(cls, n_agents: int) -> PipelineSpec:
        """Each agent reads only its predecessor's output."""
        return cls(_roles(n_agents), tuple((i, i + 1) for i in range(n_agents - 1)))


def _roles(n_agents: int) -> tuple[Agent, ...]:
    """`n_agents` roles: the first n-1 of ROLES' working roles, then the answerer."""
    if not isinstance(n_agents, int) or isinstance(n_agents, bool) or not 1 <= n_agents <= len(ROLES):
        raise WorkbenchError(f"a generated pipeline has 1 to {len(ROLES)} agents, got {n_agents!r}")
    return (*ROLES[: n_agents - 1], ROLES[-1])


def _topological(n: int, edges: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """Kahn's order (smallest ready index first); a cycle is refused with the agents on it."""
    indegree = [0] * n
    for _, b in edges:
        indegree[b] += 1
    ready = sorted(i for i in range(n) if indegree[i] == 0)
    order: list[int] = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for a, b in edges:
            if a == node:
                indegree[b] -= 1
                if indegree[b] == 0:
                    ready.append(b)
                    ready.sort()
    if len(order) < n:
        stuck = sorted(set(range(n)) - set(order))
        raise WorkbenchError(f"the pipeline's edges form a cycle through agents {stuck}")
    return tuple(order)
