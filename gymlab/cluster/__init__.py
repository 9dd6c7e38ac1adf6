"""Environment replicas ("cells") on Ray: one actor per replica runs its servers as a ``Lab`` does, so
a whole ``/run`` (and an episode's session) stays on one machine. Ray is the optional ``ray`` extra,
never imported at module level. How it works: docs/cluster.md.
"""
