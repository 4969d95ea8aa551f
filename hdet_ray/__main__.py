"""`python -m hdet_ray run SPEC`: the entrypoint `ray job submit` and KubeRay use."""

import sys

from hdet_ray.cli import main

sys.exit(main())
