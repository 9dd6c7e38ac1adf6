"""Training on gymlab environments (the ``train`` extra: torch, transformers, trl): see docs/train.md."""
