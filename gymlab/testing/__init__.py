"""Test helpers: configurable fakes for testing against gymlab over real HTTP (import the modules you need)."""
