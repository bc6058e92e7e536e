"""The benchmarks, run on demand from the project's root: ``python -m benchmarks.run`` (every
operator against its peers), ``.tiny``, ``.bandwidth``, ``.session``, ``.models`` and
``.neighbours``; ``harness`` holds what they share and ``rows`` the operator rows."""
