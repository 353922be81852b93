import sys

from bert_whitening.cli import console_main

sys.exit(console_main())
