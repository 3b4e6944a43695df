"""``python -m trtforge.cli``: the ``trtforge`` command without its console script.

Example:
    $ python -m trtforge.cli --help
"""

from trtforge.cli import main

if __name__ == "__main__":
    main()
