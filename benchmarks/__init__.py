"""The benchmarks behind the README's figures (``make bench``); see ``__main__.py``. Not part of the package."""
