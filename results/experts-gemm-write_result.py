"""Write results/experts-gemm-<stamp>.md from a run log and a header/findings text file."""
import re
import sys
log = open(sys.argv[1]).read()
start = re.search(r"^(copy \d|add  N=)", log, re.M).start()
table = log[start:].split('\ncp: ')[0].rstrip()
head, tail = open(sys.argv[2]).read().split('@@TABLE@@')
open(sys.argv[3], 'w').write(head + '```\n' + table + '\n```\n' + tail)
