import os

# Hypothesis: deterministic-enough and bounded for the 2-core CI machine.
from hypothesis import settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=False)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
