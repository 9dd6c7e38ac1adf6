"""Reward robustness probes: can a reward be earned without doing the task? ``probe(lab, env, rows)``."""

from gymlab.probes.policies import BUILTIN_PROBES
from gymlab.probes.report import ProbeReport
from gymlab.probes.run import probe

__all__ = ["BUILTIN_PROBES", "ProbeReport", "probe"]
