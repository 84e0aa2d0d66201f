"""``python -m trainium_eks.doctor``: see :mod:`trainium_eks.doctor`."""

import sys

from .runner import main

sys.exit(main())
