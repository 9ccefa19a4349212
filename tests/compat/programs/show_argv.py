"""Prints its arguments as one JSON line."""

import json
import os
import sys

print("ARGV " + json.dumps({"rank": os.environ.get("RANK"), "argv": sys.argv[1:]}), flush=True)
