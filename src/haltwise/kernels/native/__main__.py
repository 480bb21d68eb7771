"""`python -m haltwise.kernels.native`: build the extension into its cache now (make setup runs this)."""
import sys

from haltwise.kernels.native.build import main

sys.exit(main())
