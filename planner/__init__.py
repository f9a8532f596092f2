"""The planner: search every feasible way to train a model on a cluster, rank, refine, explain.

``planner.plan(model, cluster, gpus=..., global_batch=...)`` enumerates the space
(:mod:`planner.space`), drops invalid and infeasible candidates and ranks the rest with the
closed form (:mod:`planner.search`), re-simulates the best with the discrete-event engine
(:mod:`planner.refine`) and returns a :class:`PlanResult`: the counts, the ranked table and the
best plan as a :class:`simulator.plan_file.Plan`. It imports the simulator only.
"""

from planner.result import Objective, PlanResult, plan
from planner.space import Axis, Problem

__all__ = ["Axis", "Objective", "PlanResult", "Problem", "plan"]
