"""One hypothesis profile for every fuzz test, so a CI run is the same run every time.

``derandomize=True`` draws the examples from a seed derived from each test's source: a failure
in CI repeats on any machine, and a passing run stays passing until the code or the test
changes. ``database=None`` keeps hypothesis from writing a ``.hypothesis`` directory into the
repository (examples are replayed from the seed, not from a cache); the caches hypothesis
keeps even then (unicode tables, constants found in the source) go to the system's temporary
directory, not into the working tree. ``deadline=None``: this machine's syscalls are slow and
shared with CI, so a per-example time limit would only measure the neighbours; each test
bounds its own size with ``max_examples`` instead.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.configuration import set_hypothesis_home_dir

set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "ccadapter-hypothesis")

settings.register_profile(
    "ccadapter-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    # No "explain" phase: it traces every line under sys.settrace, minutes per failure here.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    # Examples here are many messages or whole recorded outputs, slow to draw by design.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ccadapter-ci")
