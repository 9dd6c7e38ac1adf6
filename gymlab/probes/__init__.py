"""Reward robustness probes: adversarial policies run through the normal agent path, and their verdict.

``probe(lab, env, rows)`` (or ``gymlab probe CONFIG``) tells whether a
reward can be earned without doing the task, before any training runs on it.
"""

from gymlab.probes.policies import BUILTIN_PROBES
from gymlab.probes.report import ProbeReport
from gymlab.probes.run import probe

__all__ = ["BUILTIN_PROBES", "ProbeReport", "probe"]
