"""`python -m netvol OUT`: build the library at OUT and print its path."""

import sys

from netvol import Unavailable, build

if len(sys.argv) != 2:
    sys.exit("usage: python -m netvol OUT.so")
try:
    print(build(sys.argv[1]))
except Unavailable as e:
    sys.exit(str(e))
