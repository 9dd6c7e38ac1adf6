"""Reward design: rubrics (``rubric``), model judges (``judge``), reward profiles (``profile``,
``nemo_profile``, ``stats``) and component frame columns (``columns``). Import from the modules:
this package imports nothing, so a resources server that uses a rubric does not load pandas."""
