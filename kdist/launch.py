"""The images' entrypoint, ``python -m kdist.launch``: the launcher is ``kdist.runtime.launch``."""
from kdist.runtime.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
