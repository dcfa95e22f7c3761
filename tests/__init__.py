"""The test suite's package. Imported before tests/conftest.py and every test module, so this is where the suite
opts back into bytecode caching."""

import os
import sys

# This machine's environment sets PYTHONDONTWRITEBYTECODE, so without this every pytest worker compiles the service
# and re-runs pytest's assertion rewriting of every test module on each run: about 10 s of CPU per worker before the
# first test (the fast lane starts two). The cached files go to __pycache__/ (ignored by git); a changed source file is
# recompiled as usual. Set DISKLESS_TESTS_NO_BYTECODE=1 to keep the environment's choice.
if "DISKLESS_TESTS_NO_BYTECODE" not in os.environ:
    sys.dont_write_bytecode = False
