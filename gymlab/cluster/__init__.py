"""Environment replicas ("cells") on Ray: one actor per replica runs what a rollout needs.

A cell runs, on its node, the servers of one replica (the resources server, the agent and
optionally the model server) exactly as a ``Lab`` runs them: on gymlab's loop, bound to
127.0.0.1, calling each other in-process. A whole ``/run`` happens inside one cell, so an episode's
session never crosses machines. The driver sends each rollout to the cell with the fewest in
flight and retries it on another cell when its cell dies (``gymlab.cluster.pool``).

Ray is an optional extra (``pip install 'gymlab[ray]'``): nothing here imports it at module level,
and ``import gymlab`` never does.
"""
