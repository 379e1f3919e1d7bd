"""Mark the failed cases of compile reports as known failures, from a checkout with nothing installed:
gate_tools.known_failures. Usage: python scripts/record_known_failures.py --help"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's gate_tools, installed or not

from gate_tools.known_failures import main

if __name__ == "__main__":
    sys.exit(main())
