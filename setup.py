"""The packages: every one under gymlab/, plus environments/ installed as ``gymlab.environments``.

pyproject.toml holds the rest; its ``packages.find`` cannot add a package mapped from another folder.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["gymlab", "gymlab.*"]), "gymlab.environments"])
