import sys

sys.exit("a module that exits while it is imported")
