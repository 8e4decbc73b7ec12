import sys

from kernelpro.cli import main

sys.exit(main())
